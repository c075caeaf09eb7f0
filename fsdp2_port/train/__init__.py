"""Training maths: the norm rule (``grad_norm``), clip, BF16 master weights, their optimizers
and LR schedules. Nothing here knows FSDP1."""
