"""The tiny, synthetic inputs of the SpecForge harness, written once into a work folder.

- ``target/``: a 2-layer Llama-shaped "target" model folder as SpecForge reads one offline: its
  ``config.json``, ``model.safetensors`` (``model.embed_tokens.weight``, ``lm_head.weight``)
  and the index that names them (``TargetHead`` and ``load_embedding`` read these);
- ``draft.json``: an Eagle3 draft config (``LlamaForCausalLMEagle3``, hidden size 64, one
  layer, a draft vocabulary of 128 of the target's 256 tokens);
- ``hidden/``: ``FILES`` offline samples in SpecForge's format (``input_ids``, ``loss_mask``,
  ``hidden_state``, ``aux_hidden_state`` of 3 target layers), drawn from one seed.

Everything is derived from seeds: two folders prepared alike hold the same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

VOCAB, DRAFT_VOCAB, HIDDEN, SEQ, FILES = 256, 128, 64, 32, 16

TARGET_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": HIDDEN,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-05,
    "vocab_size": VOCAB,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}
DRAFT_CONFIG = {
    **TARGET_CONFIG,
    "architectures": ["LlamaForCausalLMEagle3"],
    "num_hidden_layers": 1,
    "draft_vocab_size": DRAFT_VOCAB,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "torch_dtype": "bfloat16",
    "use_cache": True,
}


def prepare(work: Path) -> Path:
    """Write the inputs into ``work`` (skipped when they are there); returns ``work``."""
    import torch
    from safetensors.torch import save_file

    done = work / "inputs.done"
    if done.is_file():
        return work
    target, hidden = work / "target", work / "hidden"
    target.mkdir(parents=True, exist_ok=True)
    hidden.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    weights = {
        "model.embed_tokens.weight": torch.randn(VOCAB, HIDDEN, generator=g) * 0.02,
        "lm_head.weight": torch.randn(VOCAB, HIDDEN, generator=g) * 0.02,
    }
    save_file({k: v.to(torch.bfloat16) for k, v in weights.items()}, target / "model.safetensors")
    index = {"metadata": {}, "weight_map": {k: "model.safetensors" for k in weights}}
    (target / "model.safetensors.index.json").write_text(json.dumps(index))
    (target / "config.json").write_text(json.dumps(TARGET_CONFIG, indent=1))
    (work / "draft.json").write_text(json.dumps(DRAFT_CONFIG, indent=1))
    for i in range(FILES):
        ids = torch.randint(3, VOCAB, (SEQ,), generator=g)
        mask = torch.ones(SEQ, dtype=torch.long)
        mask[: SEQ // 4] = 0  # the prompt
        sample = {
            "input_ids": ids,
            "loss_mask": mask,
            "hidden_state": torch.randn(1, SEQ, HIDDEN, generator=g).to(torch.bfloat16),
            "aux_hidden_state": torch.randn(1, SEQ, 3 * HIDDEN, generator=g).to(torch.bfloat16),
        }
        torch.save(sample, hidden / f"data_{i:03d}.ckpt")
    (work / "unused.jsonl").write_text("")
    done.write_text("ok\n")
    return work
