"""save_pretrained one call away, in another file (C-W-D/CasCoD's checkpoint handler): the
helper saves the model's own state_dict(), this rank's DTensor shards once the model
migrates, so the call handing it the model is marked; a helper given the state to save
(``state_dict=``) is right as it is."""

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

import export


def main(model, path, state):
    model = FSDP(model, device_id=torch.device("cpu"))
    export.save_merged(model, path)
    export.save_given(model, path, state)
