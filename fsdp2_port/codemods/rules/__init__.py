"""One folder per rule: ``rule.py`` holds its codes (summary and documentation) and its
analysis; ``cases/`` holds ``*.in.py`` -> ``*.out.py`` with a snapshot of its own findings, run
with only that rule (and the codes it ``NEEDS``) enabled. What a rule is: ``base``."""
