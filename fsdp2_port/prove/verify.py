"""The equivalence harness: does FSDP2 train this model to the same numbers as FSDP1?

Four arms train one model from one seed on the same global batches:

- ``reference``: one process, the whole global batch, ``fsdp2_port.BF16Optimizer``;
- ``fsdp1``: FSDP1 + ``fsdp2_port.compat.BF16Optimizer`` on N ranks;
- ``fsdp2``: FSDP2 (``fully_shard``) + ``fsdp2_port.BF16Optimizer`` on N ranks;
- ``old_clip``: FSDP1 with the rank-local clip (each rank clips its shard by its own norm).

The sharded arms must match the reference per step (loss, grad norm) and in the final
parameters within ``judge``'s tolerances for the dtype; ``old_clip`` is shown, and judged
only when asked (it is expected to fail, which proves the harness can say no).

Ranks: spawned here (``config.world_size`` local processes), or, when this process was
started by torchrun (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` set), the job's own ranks on
however many nodes, with gloo on the CPU and NCCL on GPUs.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from fsdp2_port import versions
from fsdp2_port.fsdp1 import torch_internals
from fsdp2_port.prove import report_html
from fsdp2_port.prove.judge import (
    TOLERANCE,
    check_dtype,
    check_timeout,
    departures_at,
    outcome,
    relative_differences,
)
from fsdp2_port.prove.launch import Interrupted, backend, run_ranks, signals_interrupt
from fsdp2_port.prove.verify_request import (
    LOCAL_WORLD_SIZE,
    QUANTITIES,
    STRATEGIES,
    Config,
    under_torchrun,
)

ARMS = ("reference", "fsdp1", "fsdp2", "old_clip")
EQUIVALENT = "EQUIVALENT: FSDP1 + compat and FSDP2 + fsdp2_port match the reference"
SEQ = 16  # tokens per sequence in the default batch of a model that starts with nn.Embedding
# Frames a user's traceback leaves out: this package's and the import system's.
_NOT_THE_USERS = (Path(__file__).resolve().parent, Path(importlib.__file__).resolve().parent)


class VerifyError(ValueError):
    """A bad request (model, strategy, world size, torch version), said in one line.

    ``user_traceback``: when the user's code raised (their factory, their module), the
    frames of the traceback from their code on; empty otherwise.
    """

    def __init__(self, message: str, user_traceback: str = "") -> None:
        super().__init__(message)
        self.user_traceback = user_traceback


@dataclass
class Report:
    config: dict[str, Any]
    tolerance: dict[str, float]
    losses: dict[str, list[float]]
    norms: dict[str, list[float]]
    param_diff: dict[str, float]
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def verdict(self) -> str:
        return "equivalent" if self.ok else "not-equivalent"


# -- the request ------------------------------------------------------------------------------


def load_factory(spec: str | Callable[[], Any]) -> Callable[[], Any]:
    if callable(spec):
        return spec
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise VerifyError(f"--model takes MODULE:FACTORY, got {spec!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` would: the user's own modules
    try:
        module = importlib.import_module(module_name)
    except Interrupted:
        raise
    except (Exception, SystemExit) as e:  # an ImportError, whatever the module raised, sys.exit
        raise _users_error(f"cannot import {module_name!r}", e) from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise VerifyError(f"{module_name!r} has no callable {attr!r}")
    return factory


def build(factory: Callable[[], Any]) -> tuple[nn.Module, Callable, Callable]:
    """Call the factory from a fixed seed: (model, batch(step, size), loss(output, target))."""
    name = f"{getattr(factory, '__module__', '?')}:{getattr(factory, '__qualname__', factory)}"
    torch.manual_seed(0)
    try:
        made = factory()
    except Interrupted:  # a signal to verify, not the factory's failure
        raise
    except (Exception, SystemExit) as e:  # sys.exit(n) in a factory is a bad factory: exit 2
        raise _users_error(f"calling {name}()", e) from None
    parts = made if isinstance(made, tuple) else (made,)
    if not parts or not isinstance(parts[0], nn.Module) or len(parts) > 3:
        raise VerifyError(
            f"{name}() returned {type(made).__name__}: the factory must return a module, "
            "(module, batch_fn) or (module, batch_fn, loss_fn)"
        )
    model = parts[0]
    if not any(p.requires_grad for p in model.parameters()):
        raise VerifyError(
            f"{name}() returned {type(model).__name__} with no trainable parameter "
            "(requires_grad=True): there is nothing to train or compare"
        )
    batch_fn = parts[1] if len(parts) > 1 else _default_batch(model)
    loss_fn = parts[2] if len(parts) > 2 else _default_loss
    return model, batch_fn, loss_fn


def _users_error(what: str, e: BaseException) -> VerifyError:
    """``what: ExceptionType: message``, with the traceback from the user's first frame on
    (the harness's and the import system's frames dropped)."""
    frames = [
        f
        for f in traceback.extract_tb(e.__traceback__)
        if not f.filename.startswith("<frozen ")
        and not any(d in Path(f.filename).resolve().parents for d in _NOT_THE_USERS)
    ]
    shown = "".join(["Traceback (most recent call last):\n", *traceback.format_list(frames)])
    return VerifyError(f"{what}: {type(e).__name__}: {e}", shown if frames else "")


def _default_batch(model: nn.Module) -> Callable:
    """From the model's first nn.Embedding or nn.Linear: token ids below ``num_embeddings``
    with next-token targets (SEQ long), or ``in_features`` random floats with no target."""
    first = next((m for m in model.modules() if isinstance(m, (nn.Embedding, nn.Linear))), None)
    if first is None:
        raise VerifyError(
            "no batch function given and the model has no nn.Embedding or nn.Linear to size one"
        )

    if isinstance(first, nn.Embedding):
        vocab = first.num_embeddings

        def tokens(step: int, size: int):
            g = torch.Generator().manual_seed(10_000 + step)
            ids = torch.randint(0, vocab, (size, SEQ + 1), generator=g)
            return ids[:, :-1], ids[:, 1:]

        return tokens
    features = first.in_features

    def floats(step: int, size: int):
        g = torch.Generator().manual_seed(10_000 + step)
        return torch.randn(size, features, generator=g), None

    return floats


def _default_loss(output: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
    """Cross-entropy for integer targets, MSE otherwise, the output's mean square without."""
    output = output.float()
    if target is None:
        return output.pow(2).mean()
    if not target.is_floating_point():
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))
    return F.mse_loss(output, target.float())


def resolved(config: Config) -> Config:
    """``config`` with its world size: torchrun's under torchrun, else the one asked for
    (``LOCAL_WORLD_SIZE`` when none is); its numbers checked (``check_numbers``)."""
    if under_torchrun():
        world = int(os.environ["WORLD_SIZE"])
        if config.world_size not in (None, world):
            raise VerifyError(
                f"--world-size {config.world_size}, but torchrun started {world} ranks: "
                "under torchrun the job's ranks are the world"
            )
        config = replace(config, world_size=world)
    elif config.world_size is None:  # not `or`: a world size of 0 is refused, not defaulted
        config = replace(config, world_size=LOCAL_WORLD_SIZE)
    check_numbers(config)
    return config


def max_local_world_size(device: str) -> int:
    """The most ranks verify spawns on this machine.

    ``cuda``: one rank per GPU (NCCL needs a device of its own per rank). CPU: 4 per CPU this
    process may run on. Every rank is a process holding a torch interpreter (~0.3 GB) and
    each gloo collective waits for the slowest rank, so beyond a few ranks per core they only
    take turns: at 4 per core a step already runs several times slower than on one per core,
    while a mistyped 1000 would exhaust memory or run for hours before failing.
    """
    if device == "cuda":
        return torch.cuda.device_count()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return 4 * (cpus or 1)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_real(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_numbers(config: Config) -> None:
    """Refuse, in one line, a number out of range (``config``'s world size resolved), before
    anything is built or spawned."""
    world = config.world_size
    if not _is_int(world) or world < 2:  # type: ignore[operator]
        raise VerifyError(f"--world-size must be an integer >= 2, got {world!r}")
    if not under_torchrun() and world > max_local_world_size(config.device):  # type: ignore[operator]
        most = max_local_world_size(config.device)
        if config.device == "cuda":
            raise VerifyError(
                f"--device cuda runs one rank per GPU: --world-size {world}, found {most} GPUs"
            )
        raise VerifyError(
            f"--world-size {world} is more ranks than this machine runs well: "
            f"at most {most} (4 per CPU) on the CPU"
        )
    if not _is_int(config.steps) or config.steps < 1:
        raise VerifyError(f"--steps must be an integer >= 1, got {config.steps!r}")
    if not _is_int(config.batch_per_rank) or config.batch_per_rank < 1:
        raise VerifyError(f"batch_per_rank must be an integer >= 1, got {config.batch_per_rank!r}")
    mgn = config.max_grad_norm
    if not _is_real(mgn) or not (mgn > 0 and not math.isnan(mgn)):
        raise VerifyError(f"--max-grad-norm must be a number > 0 (inf: no clipping), got {mgn!r}")
    if not _is_real(config.lr) or not (0 < config.lr < math.inf):
        raise VerifyError(f"--lr must be a finite number > 0, got {config.lr!r}")
    check_timeout(config.timeout, VerifyError)


def check(config: Config) -> None:
    """Refuse, in one line, what cannot be verified here (``config`` resolved)."""
    assert config.world_size is not None
    if config.strategy not in STRATEGIES:
        raise VerifyError(f"--strategy must be one of {STRATEGIES}")
    check_dtype(config.dtype, VerifyError)
    check_numbers(config)
    if config.strategy == "hybrid" and (config.world_size < 4 or config.world_size % 2):
        raise VerifyError("--strategy hybrid needs an even --world-size >= 4 (2 replicas)")
    if config.device == "cpu" and versions.installed_torch() < versions.FSDP2_GLOO_CORRECT:
        raise VerifyError(
            f"torch {versions.installed_torch()} scales FSDP2 gradients by the world size on "
            f"gloo; verify on the CPU needs torch >= {versions.FSDP2_GLOO_CORRECT}"
        )
    local = int(os.environ.get("LOCAL_WORLD_SIZE", 1)) if under_torchrun() else config.world_size
    if config.device == "cuda" and torch.cuda.device_count() < local:
        raise VerifyError(
            f"--device cuda needs {local} GPUs on this node, found {torch.cuda.device_count()}"
        )
    build(load_factory(config.model))


# -- the arms, on every rank ------------------------------------------------------------------


def _units(model: nn.Module) -> set[type[nn.Module]]:
    """The classes sharded on their own: whatever the model stacks in an nn.ModuleList."""
    return {type(m) for ml in model.modules() if isinstance(ml, nn.ModuleList) for m in ml}


def _fsdp1(model: nn.Module, config: Config, device: torch.device) -> nn.Module:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    mesh = _mesh(config) if config.strategy == "hybrid" else None
    strategy = {
        "full_shard": "FULL_SHARD",
        "shard_grad_op": "SHARD_GRAD_OP",
        "hybrid": "HYBRID_SHARD",
    }
    return FSDP(
        model,
        device_id=device,
        sharding_strategy=ShardingStrategy[strategy[config.strategy]],
        auto_wrap_policy=ModuleWrapPolicy(_units(model)),
        use_orig_params=True,
        device_mesh=mesh,
    )


def _fsdp2(model: nn.Module, config: Config, device: torch.device) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    model.to(device)
    kwargs = {"mesh": _mesh(config), "reshard_after_forward": config.strategy != "shard_grad_op"}
    for unit in [m for m in model.modules() if type(m) in _units(model)]:
        fully_shard(unit, **kwargs)
    fully_shard(model, **kwargs)  # in place: the same object, now an FSDPModule as well
    return model


def _mesh(config: Config):
    from torch.distributed.device_mesh import init_device_mesh

    assert config.world_size is not None
    if config.strategy == "hybrid":
        shape = (2, config.world_size // 2)
        return init_device_mesh(config.device, shape, mesh_dim_names=("replicate", "shard"))
    return init_device_mesh(config.device, (config.world_size,))


def _full_params(model: nn.Module, arm: str) -> dict[str, torch.Tensor]:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.tensor import DTensor

    if arm in ("fsdp1", "old_clip"):
        with FSDP.summon_full_params(model):
            return {
                torch_internals.without_fsdp1_wrappers(n): p.detach().float().cpu().clone()
                for n, p in model.named_parameters()
            }
    return {
        n: (p.full_tensor() if isinstance(p, DTensor) else p).detach().float().cpu()
        for n, p in model.named_parameters()
    }


def _train(arm: str, config: Config, factory: Callable, device: torch.device) -> dict[str, Any]:
    import fsdp2_port
    from fsdp2_port import compat

    model, batch_fn, loss_fn = build(factory)
    model.to(torch.bfloat16 if config.dtype == "bf16" else torch.float32)
    rank, world = dist.get_rank(), dist.get_world_size()
    kwargs: dict[str, Any] = dict(
        max_grad_norm=config.max_grad_norm, total_steps=100 * config.steps, warmup_ratio=0.0
    )
    if arm == "reference":
        model.to(device)
        opt = fsdp2_port.BF16Optimizer(model, config.lr, **kwargs)
        opt.configure_grad_norm_reduction(enabled=False)
    elif arm == "fsdp2":
        model = _fsdp2(model, config, device)
        opt = fsdp2_port.BF16Optimizer(model, config.lr, **kwargs)
    else:
        model = _fsdp1(model, config, device)
        opt = compat.BF16Optimizer(model, config.lr, **kwargs)
        if arm == "old_clip":
            opt.configure_grad_norm_reduction(enabled=False)  # each shard by its own norm
    losses, norms = [], []
    size = config.batch_per_rank * world
    for step in range(config.steps):
        inputs, target = batch_fn(step, size)
        if arm != "reference":
            per = config.batch_per_rank
            inputs = inputs[rank * per : (rank + 1) * per]
            target = None if target is None else target[rank * per : (rank + 1) * per]
        inputs = inputs.to(device)
        if inputs.is_floating_point():
            inputs = inputs.to(torch.bfloat16 if config.dtype == "bf16" else torch.float32)
        loss = loss_fn(model(inputs), None if target is None else target.to(device))
        loss.backward()
        norms.append(opt.step().item())
        loss = loss.detach()
        if arm != "reference":
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        losses.append(loss.item())
    return {"losses": losses, "norms": norms, "params": _full_params(model, arm)}


def _relative_l2(params: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> float:
    """||params - ref|| / ||ref|| over the whole model. Per-tensor ratios would be noise:
    Adam moves an element whose true gradient is ~0 (e.g. attention key biases) by ±lr
    whichever way rounding tips its sign."""
    diff = sum((params[n] - p).pow(2).sum() for n, p in ref.items())
    return math.sqrt(diff / sum(p.pow(2).sum() for p in ref.values()))


def _arms(config: Config, device: torch.device) -> dict[str, Any] | None:
    """Train every arm on this rank; rank 0 returns each arm's figures, the others None."""
    factory = load_factory(config.model)
    results = {arm: _train(arm, config, factory, device) for arm in ARMS}
    if dist.get_rank() != 0:
        return None
    ref = results["reference"]["params"]
    return {
        arm: {
            "losses": r["losses"],
            "norms": r["norms"],
            "param_diff": _relative_l2(r["params"], ref),
        }
        for arm, r in results.items()
    }


def _device(config: Config, local_rank: int) -> torch.device:
    return torch.device("cuda", local_rank) if config.device == "cuda" else torch.device("cpu")


def _worker(rank: int, world: int, config: Config, out_path: str) -> None:
    """A spawned rank; rank 0 writes the figures to ``out_path``."""
    out = _arms(config, _device(config, rank))
    if out is not None:
        with open(out_path, "w") as f:
            json.dump(out, f)


def _spawned(config: Config) -> dict[str, Any]:
    assert config.world_size is not None
    with tempfile.TemporaryDirectory() as tmp:
        out_path = os.path.join(tmp, "arms.json")
        run_ranks(
            _worker,
            config.world_size,
            config,
            out_path,
            timeout=config.timeout,
            backend=backend(config.device),
        )
        with open(out_path) as f:
            return json.load(f)


def _in_this_job(config: Config) -> dict[str, Any]:
    """This process is one rank of torchrun's job: join its process group (unless joined
    already), train, and give every rank rank 0's figures so that all judge alike."""
    device = _device(config, int(os.environ.get("LOCAL_RANK", 0)))
    joined = dist.is_initialized()
    if not joined:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend(device.type), timeout=timedelta(seconds=config.timeout))
    try:
        figures: list[Any] = [_arms(config, device)]
        dist.broadcast_object_list(figures, src=0)
        return figures[0]
    finally:
        if not joined:
            dist.destroy_process_group()


# -- run and judge ----------------------------------------------------------------------------


def verify(config: Config) -> Report:
    """Train the four arms on this job's ranks under torchrun, else on ``config.world_size``
    spawned local ranks, and judge them (the same report on every rank).

    Spawned ranks are owned: SIGTERM, SIGHUP or SIGINT to this process, a failed or hung
    rank, or the end of the run leaves no rank and no process a rank started
    (``launch.run_ranks``); a signal then raises ``launch.Interrupted`` (exit 128 + n).
    """
    config = resolved(config)
    if under_torchrun():  # torchrun owns the ranks, and signals them
        check(config)
        arms = _in_this_job(config)
    else:
        # SIGTERM, SIGHUP, SIGINT: Interrupted, once every spawned rank is gone (run_ranks)
        with signals_interrupt("verify's ranks"):
            check(config)
            arms = _spawned(config)
    tol = {q: TOLERANCE[q][config.dtype] for q in QUANTITIES}
    report = Report(
        config={
            **{
                k: (v if isinstance(v, (str, int, float, bool)) else repr(v))
                for k, v in asdict(config).items()
            },
            "ranks": "torchrun" if under_torchrun() else "spawned",
        },
        tolerance=tol,
        losses={a: arms[a]["losses"] for a in ARMS},
        norms={a: arms[a]["norms"] for a in ARMS},
        param_diff={a: arms[a]["param_diff"] for a in ARMS if a != "reference"},
    )
    for arm in _judged(report.config):
        for name, series, rtol in (
            ("loss", report.losses, tol["loss"]),
            ("grad norm", report.norms, tol["norm"]),
        ):
            for step, (want, got) in enumerate(zip(series["reference"], series[arm])):
                if departures_at(step, {name: want}, {name: got}, {name: rtol}):
                    report.failures.append(
                        f"{arm}: step {step} {name} {got:.6g} vs reference {want:.6g}"
                    )
        if not report.param_diff[arm] <= tol["param"]:
            report.failures.append(
                f"{arm}: parameters differ by {report.param_diff[arm]:.3g} (relative), "
                f"tolerance {tol['param']:g}"
            )
    return report


def _judged(config: dict[str, Any]) -> list[str]:
    """The arms held to the tolerances: the fixed ones, and the old clip when asked."""
    return ["fsdp1", "fsdp2"] + (["old_clip"] if config["judge_old_clip"] else [])


def as_json(report: Report) -> dict[str, Any]:
    """What ``--format json`` prints for a verdict."""
    return {**asdict(report), "ok": report.ok, "verdict": report.verdict}


def format_text(report: Report) -> str:
    c, tol = report.config, report.tolerance
    lines = [
        f"model {c['model']}  world size {c['world_size']} ({c['ranks']})  "
        f"strategy {c['strategy']}  "
        f"dtype {c['dtype']}  max_grad_norm {c['max_grad_norm']}  device {c['device']}",
        "",
        f"{'step':>4} | {'loss: ' + ' / '.join(ARMS):<44} | grad norm: {' / '.join(ARMS)}",
    ]
    for step in range(len(report.losses["reference"])):
        losses = " ".join(f"{report.losses[a][step]:10.5f}" for a in ARMS)
        norms = " ".join(f"{report.norms[a][step]:10.4f}" for a in ARMS)
        lines.append(f"{step:>4} | {losses} | {norms}")
    lines.append("")
    lines.append("parameters after the last step, ||arm - reference|| / ||reference||:")
    for arm, diff in report.param_diff.items():
        note = "" if arm != "old_clip" or c["judge_old_clip"] else "  (shown, not judged)"
        lines.append(f"  {arm:<9} {diff:.3g}{note}")
    lines.append(
        f"tolerances ({c['dtype']}): loss rtol {tol['loss']:g}, grad norm rtol {tol['norm']:g}, "
        f"parameters {tol['param']:g}"
    )
    lines.append("")
    if report.ok:
        lines.append(EQUIVALENT)
    else:
        lines.append("NOT EQUIVALENT:")
        lines.extend(f"  {f}" for f in report.failures)
    return "\n".join(lines)


def html_report(report: Report) -> str:
    """The report as one self-contained page (``fsdp2-port verify --html``)."""
    c, steps = report.config, list(range(len(report.losses["reference"])))
    judged = _judged(c)
    params = [
        f"parameters after the last step, ||{a} - reference|| / ||reference|| = {d:.3g}"
        + ("" if a in judged else " (shown, not judged)")
        for a, d in report.param_diff.items()
    ]
    return report_html.render(
        title=f"fsdp2-port verify: {c['model']}",
        verdict=EQUIVALENT if report.ok else "NOT EQUIVALENT",
        outcome=outcome(report.verdict),
        details=[*report.failures, *params],
        steps=steps,
        curves={"loss": report.losses, "grad norm": report.norms},
        rel_diffs={
            "loss": relative_differences(report.losses, "reference"),
            "grad norm": relative_differences(report.norms, "reference"),
        },
        tolerance={"loss": report.tolerance["loss"], "grad norm": report.tolerance["norm"]},
        baseline="reference",
        settings={**c, "tolerance": ", ".join(f"{k} {v:g}" for k, v in report.tolerance.items())},
    )
