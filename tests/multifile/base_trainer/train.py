"""Train the policy with the base-class trainer.

    torchrun --nproc-per-node 2 train.py --steps 4
"""

import argparse

import torch.distributed as dist

from fsdp2_port.prove.launch import exit_now

from trainers import PolicyTrainer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--accum", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--max-grad-norm", type=float, default=1.0)
    parser.add_argument("--log-every", type=int, default=1)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    PolicyTrainer(args).fit()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    exit_now()
