"""How fast ``fsdp2-port migrate`` is, against ``python -m libcst.tool codemod`` on the same rules.

Two trees: torch's own installed package (found without importing torch) and a generated
training repository (realistic FSDP1 training files among ordinary model/data/util modules).
Both tools run the same rules (``migrate.MigrateCommand``) as a dry run with 2 jobs; the
difference is that ``fsdp2-port migrate`` does not parse files without FSDP1 text.

Prints files/s, the speed ratio and each run's peak memory (max RSS of its process tree, from
``resource.getrusage(RUSAGE_CHILDREN)`` in a fresh driver process), and writes
``benchmarks/results/codemod_speed.json``.

    python benchmarks/codemod_speed.py [--jobs 2] [--generated-files 400]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Runs one command in a fresh process and reports its wall time and its children's peak RSS.
_DRIVER = textwrap.dedent(
    """
    import json, resource, subprocess, sys, time
    start = time.perf_counter()
    done = subprocess.run(
        sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    seconds = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"seconds": seconds, "peak_mib": peak_kib / 1024, "rc": done.returncode,
                      "stderr_tail": done.stderr[-400:]}))
    """
)

_TRAINER = """\
import functools
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import (
    FullStateDictConfig,
    FullyShardedDataParallel as FSDP,
    MixedPrecision,
    ShardingStrategy,
    StateDictType,
)
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

from {pkg}.model import Block{n}, Model{n}

MIXED = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


class Trainer{n}:
    def __init__(self, config):
        self.config = config
        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={{Block{n}}})
        self.model = FSDP(
            Model{n}(config),
            auto_wrap_policy=policy,
            sharding_strategy=ShardingStrategy.{strategy},
            mixed_precision=MIXED,
            device_id=torch.cuda.current_device(),
            use_orig_params=True,
        )
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.lr)

    def step(self, batches):
        for micro in batches[:-1]:
            with self.model.no_sync():
                self.model(micro).loss.backward()
        loss = self.model(batches[-1]).loss
        loss.backward()
        norm = self.model.clip_grad_norm_(self.config.max_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach(), norm

    def save(self, directory):
        with FSDP.state_dict_type(
            self.model,
            StateDictType.FULL_STATE_DICT,
            FullStateDictConfig(offload_to_cpu=True, rank0_only=True),
        ):
            state = self.model.state_dict()
            optim = FSDP.optim_state_dict(self.model, self.optimizer)
        if dist.get_rank() == 0:
            torch.save({{"model": state, "optim": optim}}, os.path.join(directory, "ckpt.pt"))
"""

_MODULE = '''\
"""Model, data and utility code with nothing FSDP in it ({n})."""
import math

import torch
from torch import nn


class Block{n}(nn.Module):
    def __init__(self, dim: int = 512, heads: int = 8) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm(x))


def cosine(step: int, total: int, warmup: int) -> float:
    if step < warmup:
        return step / max(1, warmup)
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def batches(data, size: int):
    for start in range(0, len(data), size):
        yield data[start : start + size]
'''


def torch_package() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("torch is not installed: nothing to benchmark on")
    return Path(next(iter(spec.submodule_search_locations)))


def generate_repo(root: Path, files: int, seed: int = 0) -> None:
    """``files`` Python files; one in twenty is an FSDP1 trainer, the rest ordinary modules."""
    rng = random.Random(seed)
    for index in range(files):
        package = root / f"pkg{index // 50}"
        package.mkdir(parents=True, exist_ok=True)
        if index % 20 == 0:
            text = _TRAINER.format(
                n=index, pkg=package.name, strategy=rng.choice(["FULL_SHARD", "SHARD_GRAD_OP"])
            )
        else:
            text = _MODULE.format(n=index) + "\n" * rng.randint(0, 3)
        (package / f"module_{index}.py").write_text(text)


def count_py(tree: Path) -> int:
    from codemods.sources import discover

    return len(discover([str(tree)])[0])


def measure(command: list[str]) -> dict:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    out = subprocess.run(
        [sys.executable, "-c", _DRIVER, *command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def bench(name: str, tree: Path, jobs: int) -> dict:
    files = count_py(tree)
    ours = measure([sys.executable, "-m", "fsdp2_port", "migrate", "--jobs", str(jobs), str(tree)])
    theirs = measure(
        # Options go after COMMAND: libcst.tool reads the first non-flag word as the command.
        [
            sys.executable,
            "-m",
            "libcst.tool",
            "codemod",
            "migrate.MigrateCommand",
            "-j",
            str(jobs),
            "--no-format",
            "--hide-progress",
            "-u",
            "1",
            str(tree),
        ]
    )
    result = {
        "tree": name,
        "files": files,
        "fsdp2_port_migrate": {**ours, "files_per_s": files / ours["seconds"]},
        "libcst_tool_codemod": {**theirs, "files_per_s": files / theirs["seconds"]},
        "speedup": theirs["seconds"] / ours["seconds"],
    }
    print(
        f"{name}: {files} files | fsdp2-port migrate {ours['seconds']:.1f} s "
        f"({files / ours['seconds']:.0f} files/s, "
        f"peak {ours['peak_mib']:.0f} MiB, rc {ours['rc']}) | "
        f"libcst.tool codemod {theirs['seconds']:.1f} s "
        f"({files / theirs['seconds']:.1f} files/s, "
        f"peak {theirs['peak_mib']:.0f} MiB, rc {theirs['rc']}) | "
        f"ratio {result['speedup']:.1f}x"
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--generated-files", type=int, default=400)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    results = [bench("torch package", torch_package(), args.jobs)]
    with tempfile.TemporaryDirectory(prefix="fsdp2-port-bench-") as tmp:
        generate_repo(Path(tmp), args.generated_files)
        results.append(bench("generated FSDP1 repo", Path(tmp), args.jobs))
    out = ROOT / "benchmarks" / "results" / "codemod_speed.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"jobs": args.jobs, "python": sys.version.split()[0], "results": results}, indent=2
        )
        + "\n"
    )
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
