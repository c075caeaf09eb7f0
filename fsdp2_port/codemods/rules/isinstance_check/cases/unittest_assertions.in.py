"""unittest's type assertions test their second argument as isinstance does."""
import unittest

import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


class WrappingTest(unittest.TestCase):
    def test_wrapped(self):
        module = FSDP(torch.nn.Linear(2, 2), device_id=0)
        self.assertIsInstance(module, FSDP, "the strategy must hold the FSDP module")

    def test_plain(self):
        module = torch.nn.Linear(2, 2)
        self.assertNotIsInstance(module, FSDP)
