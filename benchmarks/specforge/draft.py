"""``MODULE:FACTORY`` for ``fsdp2-port convert-checkpoint --model``: the harness's Eagle3 draft
model, as SpecForge's ``BF16Optimizer`` was given it (embedding frozen), built from the checkout
named by ``SPECFORGE_CHECKOUT`` and the work folder named by ``SPECFORGE_HARNESS_WORK``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def build() -> Any:
    checkout = Path(os.environ["SPECFORGE_CHECKOUT"])
    work = Path(os.environ["SPECFORGE_HARNESS_WORK"])
    sys.path[:0] = [str(checkout), str(HERE)]
    import standins

    with standins.import_stubs():
        from specforge import AutoDraftModelConfig, AutoEagle3DraftModel
    config = AutoDraftModelConfig.from_file(str(work / "draft.json"))
    model = AutoEagle3DraftModel.from_config(config, attention_backend="sdpa")
    model.freeze_embedding()
    return model
