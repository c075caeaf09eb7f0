"""One rank of SpecForge's ``scripts/train_eagle3.py`` on the CPU, as a torchrun script.

    torchrun --nproc-per-node 2 benchmarks/specforge/run_train_eagle3.py \
        --checkout SPECFORGE --work WORK --out OUT [--steps 6] [-- TRAIN_EAGLE3_ARGS...]

Imports the checkout's ``scripts/train_eagle3.py`` (its text untouched), puts the stand-ins of
``standins.py`` in place, replaces ``build_dataloaders`` by the same steps on the synthetic
offline samples of ``inputs.py`` (no tokenizer, no conversations to download: the vocabulary
mapping comes from SpecForge's own ``process_token_dict_to_mappings`` over the samples'
tokens), and runs its ``main()`` offline: the draft model trains on saved target hidden
states. SpecForge's FSDP wrapping, ``BF16Optimizer``, clip, schedule, save and resume are
its own.

Checkpoints: SpecForge saves ``OUT/epoch_E_step_S`` (``training_state.pt`` from rank 0, the
draft weights with ``save_pretrained``) every ``--save-interval`` steps and at the end.
``fsdp2-port compare --resume-at K`` (docs/compare.md) maps onto that: with
``FSDP2_PORT_SAVE_AT=K`` the run saves every K steps into ``FSDP2_PORT_CHECKPOINT``; with
``FSDP2_PORT_RESUME_FROM`` it resumes (SpecForge's ``--resume``) from the step-K checkpoint
found there, linked alone into ``OUT``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _arguments(args: argparse.Namespace, work: Path, out: Path) -> list[str]:
    save_at = os.environ.get("FSDP2_PORT_SAVE_AT")
    resume_from = os.environ.get("FSDP2_PORT_RESUME_FROM")
    argv = [
        "--target-model-path", str(work / "target"),
        "--draft-model-config", str(work / "draft.json"),
        "--train-data-path", str(work / "unused.jsonl"),
        "--train-hidden-states-path", str(work / "hidden"),
        "--cache-dir", str(out / "cache"),
        "--attention-backend", "sdpa",
        "--report-to", "none",
        "--num-epochs", "1",
        "--batch-size", "1",
        "--max-length", "32",
        "--ttt-length", "3",
        "--log-interval", "1",
        "--dataloader-num-workers", "0",
        "--learning-rate", str(args.lr),
        "--warmup-ratio", str(args.warmup_ratio),
        "--max-grad-norm", str(args.max_grad_norm),
        "--total-steps", str(args.total_steps),
        "--max-num-steps", str(args.steps),
        "--save-interval", save_at or str(10**6),
        "--output-dir", os.environ.get("FSDP2_PORT_CHECKPOINT", str(out)),
    ]  # fmt: skip
    if resume_from:
        step = int(os.environ["FSDP2_PORT_RESUME_AT"])
        found = sorted(Path(resume_from).glob(f"epoch_*_step_{step}"))
        if len(found) != 1:
            sys.exit(f"no single epoch_*_step_{step} checkpoint in {resume_from}: {found}")
        resumed = out / "resumed"  # SpecForge resumes from the last checkpoint it finds here
        if resumed.exists():
            shutil.rmtree(resumed)  # a previous run's, which saved its own final one
        resumed.mkdir(parents=True)
        (resumed / found[0].name).symlink_to(found[0].resolve())
        argv[argv.index("--output-dir") + 1] = str(resumed)
        argv.append("--resume")
    return argv + args.rest


def _offline_dataloaders(script: object, work: Path):
    """``build_dataloaders`` without a tokenizer: SpecForge's offline dataset and dataloader,
    and its vocabulary mapping from the samples' tokens."""
    import torch
    from specforge.data.preprocessing import process_token_dict_to_mappings

    def build_dataloaders(args, draft_model_config, processor=None):
        counts: Counter[int] = Counter()
        for path in sorted((work / "hidden").glob("*.ckpt")):
            sample = torch.load(path, weights_only=False)
            counts.update(sample["input_ids"][sample["loss_mask"] == 1].tolist())
        d2t, t2d = process_token_dict_to_mappings(
            counts, draft_model_config.draft_vocab_size, draft_model_config.vocab_size
        )
        os.makedirs(args.cache_dir, exist_ok=True)
        mapping = os.path.join(args.cache_dir, "vocab_mapping.pt")
        torch.save({"d2t": d2t, "t2d": t2d}, mapping)
        dataset = script.build_offline_eagle3_dataset(  # type: ignore[attr-defined]
            args.train_hidden_states_path, args.max_length, ttt_length=args.ttt_length
        )
        loader = script.prepare_dp_dataloaders(  # type: ignore[attr-defined]
            dataset,
            args.target_batch_size,
            num_workers=args.dataloader_num_workers,
            shuffle=True,
            process_group=script.get_dp_group(),  # type: ignore[attr-defined]
            is_vlm=False,
        )
        return loader, mapping, None

    return build_dataloaders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True, help="inputs.py's folder")
    parser.add_argument("--out", type=Path, required=True, help="this run's own folder")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--total-steps", type=int, default=8)
    parser.add_argument("--warmup-ratio", type=float, default=0.25)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--max-grad-norm", type=float, default=0.5)
    parser.add_argument("rest", nargs="*", help="more train_eagle3.py arguments, after --")
    args = parser.parse_args()
    if not (args.work / "inputs.done").is_file():
        sys.exit(f"{args.work}: no inputs (python benchmarks/specforge/harness.py prepares them)")
    args.out.mkdir(parents=True, exist_ok=True)
    sys.path[:0] = [str(args.checkout), str(args.checkout / "scripts"), str(HERE)]
    import standins

    standins.install_cpu()
    with standins.import_stubs():
        script = importlib.import_module("train_eagle3")
    standins.no_sequence_parallelism()
    standins.rotary_buffers_on_resume()
    standins.fsdp1_on_cpu(script)
    standins.torch_loss()
    standins.printing_tracker()
    script.build_dataloaders = _offline_dataloaders(script, args.work)
    sys.argv = ["train_eagle3.py", *_arguments(args, args.work, args.out)]
    script.main()


if __name__ == "__main__":
    main()
    from fsdp2_port.prove.launch import exit_now

    exit_now()
