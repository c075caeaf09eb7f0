"""Stand-ins for what SpecForge's ``scripts/train_eagle3.py`` needs a GPU or a download for.

Nothing else is replaced: SpecForge's FSDP wrapping, its ``BF16Optimizer`` (clip included), its
schedule and its checkpoint code run as the checkout has them. What is stood in, and why:

- packages the CPU run never calls but SpecForge imports at module level (``sglang``,
  ``yunchang``, ``qwen_vl_utils``, ``mooncake``, ``wandb``, ``swanlab``, ``triton``): empty
  modules, only where the package is not installed;
- the CUDA device: ``.cuda()`` leaves tensors and modules where they are, one "device";
  process groups are gloo, device meshes CPU meshes; FSDP1 gets ``device_id=cpu`` where the
  script gave none (on a GPU it would take the current CUDA device);
- the Triton loss kernel (``LogSoftmaxLoss``): its formula in torch (SpecForge's own reference,
  ``_compute_loss``, without ``torch.compile``);
- the experiment tracker's sink (``--report-to none``): rank 0 prints one
  ``step N loss L grad_norm G lr X`` line per logged step, which ``fsdp2-port compare`` reads.

One repair, not a stand-in, is applied to OLD and NEW alike: ``rotary_buffers_on_resume``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Iterator
from typing import Any

STUBBED = ("sglang", "yunchang", "qwen_vl_utils", "mooncake", "wandb", "swanlab", "triton")
#: torch modules that look for triton when imported: imported before the stubs exist
TRITON_PROBES = (
    "torch._dynamo",
    "torch._inductor.runtime.triton_compat",
    "torch._inductor.codecache",
    "torch._inductor.compile_fx",
    "torch._dynamo.backends.debugging",
    "functorch.compile",
)


class _Empty(types.ModuleType):
    """A package whose every attribute is an inert class (a decorator, a base, a value)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def inert(self: Any, *args: Any, **kwargs: Any) -> Any:
            return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else None

        return type(name, (), {"__init__": lambda self, *a, **k: None, "__call__": inert})


class _Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, packages: set[str]) -> None:
        self.packages = packages

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name.split(".")[0] in self.packages:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _Empty(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


@contextlib.contextmanager
def import_stubs() -> Iterator[list[str]]:
    """While open, empty modules for the packages of ``STUBBED`` that are not installed; on
    exit they are gone again (what imported them keeps its references), so that torch's and
    transformers' later probes for ``triton`` find none, as on this machine.

    torch's dynamo and transformers' auto classes are imported first, for the same reason.
    """
    for module in TRITON_PROBES:
        importlib.import_module(module)
    import transformers

    transformers.AutoProcessor, transformers.AutoModelForCausalLM  # noqa: B018
    missing = {p for p in STUBBED if importlib.util.find_spec(p) is None}
    finder = _Stubs(missing)
    sys.meta_path.insert(0, finder)
    try:
        yield sorted(missing)
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n.split(".")[0] in missing]:
            del sys.modules[name]


def install_cpu() -> None:
    """One CPU "device": ``.cuda()`` is a no-op, gloo groups, CPU meshes."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed import device_mesh

    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    nn.Module.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    torch.cuda.device_count = lambda: 1
    torch.cuda.set_device = lambda device: None

    init = dist.init_process_group

    @functools.wraps(init)
    def gloo(*args: Any, **kwargs: Any) -> None:
        kwargs["backend"] = "gloo"
        return init(*args[1:], **kwargs) if args else init(**kwargs)

    dist.init_process_group = gloo
    mesh = device_mesh.init_device_mesh

    @functools.wraps(mesh)
    def cpu_mesh(device_type: str, *args: Any, **kwargs: Any) -> Any:
        return mesh("cpu", *args, **kwargs)

    device_mesh.init_device_mesh = cpu_mesh
    dist.device_mesh.init_device_mesh = cpu_mesh  # type: ignore[attr-defined]
    from_group = device_mesh.DeviceMesh.from_group

    def cpu_from_group(group: Any, device_type: str, *args: Any, **kwargs: Any) -> Any:
        return from_group(group, "cpu", *args, **kwargs)

    device_mesh.DeviceMesh.from_group = staticmethod(cpu_from_group)  # type: ignore[assignment]


def no_sequence_parallelism() -> None:
    """yunchang's sequence-parallel groups (a GPU-only package) for ``sp`` sizes of 1: none."""
    from specforge import distributed

    distributed.PROCESS_GROUP.ULYSSES_PG = None
    distributed.PROCESS_GROUP.RING_PG = None


def rotary_buffers_on_resume() -> None:
    """Not a stand-in: a repair, in OLD and NEW alike, of SpecForge's resume under its pinned
    transformers 5.8.1, whose ``from_pretrained`` leaves a module's non-persistent buffers
    uninitialised (the draft's rotary ``inv_freq``, ``cos_cached``, ``sin_cached``: every loss
    after a resume is NaN, on one rank too). They are recomputed as a fresh model has them."""
    import torch
    from specforge import AutoEagle3DraftModel

    load = AutoEagle3DraftModel.from_pretrained.__func__  # type: ignore[attr-defined]

    def from_pretrained(cls: Any, *args: Any, **kwargs: Any) -> Any:
        model = load(cls, *args, **kwargs)
        fresh = cls.from_config(
            model.config,
            attention_backend=kwargs.get("attention_backend", "sdpa"),
            torch_dtype=kwargs.get("torch_dtype", torch.bfloat16),
        )
        saved = set(model.state_dict())
        with torch.no_grad():
            for name, buffer in fresh.named_buffers():
                if name not in saved:
                    model.get_buffer(name).copy_(buffer)
        return model

    AutoEagle3DraftModel.from_pretrained = classmethod(from_pretrained)  # type: ignore[method-assign]


def fsdp1_on_cpu(script: types.ModuleType) -> None:
    """The script's ``FSDP`` (where it still has one) with ``device_id=cpu`` unless given: a
    subclass, so its static methods and ``isinstance`` tests are FSDP1's own."""
    fsdp = getattr(script, "FSDP", None)
    if fsdp is None:
        return
    import torch

    class FSDPOnCPU(fsdp):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("device_id", torch.device("cpu"))
            super().__init__(*args, **kwargs)

    script.FSDP = FSDPOnCPU


def torch_loss() -> None:
    """SpecForge's Triton loss kernel as its own reference formula, in torch."""
    import torch
    from specforge.core import loss

    def forward(logits: Any, target_p: Any, position_mask: Any) -> Any:
        logp = torch.log_softmax(logits.float(), dim=2)
        return -torch.sum(position_mask * (target_p * logp), 2).mean()

    loss.LogSoftmaxLoss.apply = staticmethod(forward)  # type: ignore[assignment]


def printing_tracker() -> None:
    """``--report-to none``'s tracker prints the logged step on rank 0."""
    import torch.distributed as dist
    from specforge import tracker

    def log(self: Any, logdict: dict[str, Any], step: int | None = None) -> None:
        if dist.get_rank() != 0 or "train/ploss_0" not in logdict:
            return
        norm = logdict.get("train/grad_norm", float("nan"))
        print(
            f"step {step} loss {logdict['train/ploss_0']!r} grad_norm {norm!r} "
            f"lr {logdict.get('train/lr', float('nan'))!r}",
            flush=True,
        )

    tracker.NoOpTracker.log = log  # type: ignore[method-assign]
