"""unittest's type assertions test their second argument as isinstance does."""
import unittest

import torch
from torch.distributed.fsdp import FSDPModule, fully_shard


class WrappingTest(unittest.TestCase):
    def test_wrapped(self):
        module = fully_shard(torch.nn.Linear(2, 2))
        self.assertIsInstance(
            module,
            FSDPModule,
            "the strategy must hold the FSDP module",
        )

    def test_plain(self):
        module = torch.nn.Linear(2, 2)
        self.assertNotIsInstance(module, FSDPModule)
