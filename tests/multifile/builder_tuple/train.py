"""Train a tiny language model; save a sharded checkpoint at ``--resume-at`` and resume from it.

    torchrun --nproc-per-node 2 train.py --steps 5 --resume-at 3 --checkpoint DIR

At ``--resume-at`` the run saves, takes a step it should not have (as a run that crashed after
saving would have), loads the checkpoint back and trains on: the later losses are the
uninterrupted run's only if the checkpoint restored the model and the optimizer.
"""

import argparse

import torch.distributed as dist

from fsdp2_port.prove.launch import exit_now

from lm.trainer import Trainer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--accum", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--resume-at", type=int, default=3)
    parser.add_argument("--checkpoint", required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    Trainer(args).fit()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    exit_now()
