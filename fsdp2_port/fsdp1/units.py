"""Which modules FSDP1 makes units, with which arguments, and what each unit ignores: FSDP1's
semantics in fsdp2_port's own code, so that a migrated run executes no FSDP1 implementation.

``fully_shard_like_fsdp1`` must shard what ``FullyShardedDataParallel`` would have wrapped. FSDP1
decides that in ``torch/distributed/fsdp/{wrap,_wrap_utils,_init_utils}.py``; this module
decides it again, from their documented and observed behaviour, without calling them.
``tests/test_fsdp1_units.py`` compares every decision with FSDP1's own (for as long as torch ships
FSDP1) and ``tests/test_like_fsdp1.py`` the training runs. Invariants:

- **Policies are read, not run, when they are FSDP1's.** A ``ModuleWrapPolicy`` (its module
  classes), a ``CustomPolicy`` (its ``lambda_fn``, the user's, is called), and callables that
  are FSDP1's policy functions or ``functools.partial`` of them (``always_wrap_policy``,
  ``transformer_auto_wrap_policy``, ``size_based_auto_wrap_policy`` with its
  ``FORCE_LEAF_MODULES`` / ``EXCLUDE_WRAP_MODULES`` defaults read at decision time,
  ``lambda_auto_wrap_policy``, ``_module_wrap_policy``, ``_or_policy`` of any of these,
  ``_wrap_module_cls_individually``, a ``ModuleWrapPolicy`` called as a function) are
  evaluated here on the arguments FSDP1 would bind. Any other callable, and any other
  ``_Policy`` whose ``_run_policy`` is not torch's, is the user's and is called exactly as FSDP1
  calls it. An FSDP1 policy this module does not know raises rather than run FSDP1 code.
- **FSDP1's two traversals.** A ``_Policy`` picks its targets first, then units are built in
  post-order (children before parents, each module once). A callable is asked, post-order,
  whether to recurse into a module (``recurse=True``, with the numel of its parameters that are
  not ignored) and whether to wrap it (``recurse=False``, with what its wrapped children left);
  ignored modules are not entered, the root is never wrapped here. ``wrap`` is called at the
  moment FSDP1 constructs each child, with the arguments FSDP1 passes it.
- **Mixed precision's exceptions.** With ``mixed_precision`` and a policy, the modules of
  ``MixedPrecision._module_classes_to_ignore`` (BatchNorm) become units of their own with
  ``mixed_precision=None`` (for a callable: any module the recursion reaches, which then always
  recurses) and run in fp32 between hooks that cast their inputs up and their outputs back to
  the input dtype, FSDP1's hooks re-done here, appended on every such module under the root.
- **Ignored states** are FSDP1's resolution: ``ignored_modules`` or ``ignored_states`` (all
  parameters or all modules, not both arguments), module subtrees, modules that composable
  ``replicate`` was applied to, parameters of ignored modules plus the ones given, and the
  buffers of ignored modules (FSDP1 keeps their names; the same buffers).
"""

from __future__ import annotations

import collections
import functools
import importlib
import inspect
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision
from torch.distributed.fsdp.wrap import (
    CustomPolicy,
    ModuleWrapPolicy,
    always_wrap_policy,
    lambda_auto_wrap_policy,
    size_based_auto_wrap_policy,
    transformer_auto_wrap_policy,
)

from fsdp2_port.fsdp1 import torch_internals

#: ``wrap(module, **kwargs)``: build one unit, as FSDP1 constructs one child instance
Wrap = Callable[..., Any]

# -- ignored states ------------------------------------------------------------------------------


@dataclass
class Ignored:
    """What one FSDP1 unit ignores: module subtrees, parameters, and the buffers of the ignored
    modules (their dtype is left alone by ``buffer_dtype``; FSDP1 keeps their names)."""

    modules: set[nn.Module]
    params: set[nn.Parameter]
    buffers: set[Tensor]


def resolve_ignored(module: nn.Module, ignored_modules: Any, ignored_states: Any) -> Ignored:
    """What FSDP1 ignores for a unit built on ``module`` from these two arguments."""
    if ignored_modules is not None and ignored_states is not None:
        raise ValueError(
            "ignored_modules and ignored_states: pass one (FSDP1 refuses both); ignored_states "
            "takes modules as well as parameters"
        )
    given_params: list[Any] = []
    roots: Iterable[Any] = ignored_modules if ignored_modules is not None else ()
    if ignored_states is not None:
        states = list(ignored_states)
        if states and not (
            all(isinstance(s, nn.Parameter) for s in states)
            or all(isinstance(s, nn.Module) for s in states)
        ):
            kinds = sorted({type(s).__name__ for s in states})
            raise ValueError(
                f"ignored_states must be all nn.Parameter or all nn.Module, not a mix of {kinds}"
            )
        if states and isinstance(states[0], nn.Parameter):
            given_params = states
        else:
            roots = states
    roots = list(roots)
    if not all(isinstance(m, nn.Module) for m in roots):
        kinds = sorted({type(m).__name__ for m in roots})
        raise ValueError(f"ignored_modules must hold nn.Module objects only, not {kinds}")
    if any(isinstance(m, FullyShardedDataParallel) for m in roots):
        raise ValueError("ignored_modules holds an FSDP1 module: ignore the module it wraps")
    root_set = set(roots)
    # FSDP1 ignores the modules that cannot compose with it (composable replicate)
    root_set.update(m for m in module.modules() if "replicate" in _composable_apis(m))
    modules = {
        m
        for root in root_set
        for m in root.modules()
        if not isinstance(m, FullyShardedDataParallel)
    }
    if module in modules:
        warnings.warn(
            f"ignoring the module given to FSDP itself ({type(module).__name__}) ignores all of "
            "its parameters, which FSDP1 does not support well",
            stacklevel=3,
        )
    params = {p for m in modules for p in m.parameters()}
    params.update(given_params)
    params = {p for p in params if not torch_internals.is_fsdp1_flattened(p)}
    buffers = {b for m in modules for b in m.buffers()}
    return Ignored(modules, params, buffers)


def _composable_apis(module: nn.Module) -> Iterable[str]:
    registry = torch_internals.call("composable_registry", module=module)
    return registry or ()


# -- auto-wrap -----------------------------------------------------------------------------------


def wrap_units(
    root: nn.Module,
    policy: Any,
    ignored: Ignored,
    root_kwargs: dict[str, Any],
    wrap: Wrap,
    *,
    fp32_hooks: bool = True,
) -> None:
    """FSDP1's auto-wrap of ``root`` with ``policy`` (or a predicate ``is_unit(module)``, read as
    ``lambda_auto_wrap_policy``): ``wrap(module, **kwargs)`` for every module
    below ``root`` that FSDP1 would wrap, when and with what FSDP1 would construct it.

    ``ignored`` is the root's; ``root_kwargs`` what FSDP1 hands its children (the root's
    arguments, ``ignored_states`` set to the root's ignored parameters). ``fp32_hooks=False``
    leaves mixed precision's fp32 hooks off (the caller runs those units in fp32 itself): the
    units are the same."""
    policy = _as_policy(policy)  # a predicate, as the codemod writes one (F2P013)
    mixed_precision: MixedPrecision | None = root_kwargs.get("mixed_precision")
    classes: tuple[type, ...] = ()
    if mixed_precision is not None:
        classes = fp32_classes(mixed_precision)
    if isinstance(policy, torch_internals.load("policy_base")):
        root_kwargs["auto_wrap_policy"] = None  # as FSDP1 hands a _Policy's units their kwargs
        targets = _run_policy(policy, root, ignored, root_kwargs)
        if mixed_precision is not None:
            _no_mixed_precision_for(classes, root, ignored, root_kwargs, targets)
            if fp32_hooks:
                _run_in_fp32(classes, root)
        _check_uniformly_frozen(
            root, targets, ignored.params, bool(root_kwargs.get("use_orig_params", False))
        )
        _wrap_post_order(root, targets, wrap)
        return

    def ask(module: nn.Module, recurse: bool, nonwrapped_numel: int) -> Any:
        return _ask(policy, module, recurse, nonwrapped_numel)

    def kwargs_for(module: nn.Module) -> dict[str, Any]:
        return dict(root_kwargs)

    if mixed_precision is not None:
        if fp32_hooks:
            _run_in_fp32(classes, root)

        def ask(module: nn.Module, recurse: bool, nonwrapped_numel: int) -> Any:
            # FSDP1 ors the policy with "wrap these classes apart, always recurse"
            return _ask(policy, module, recurse, nonwrapped_numel) or (
                recurse or isinstance(module, classes)
            )

        def kwargs_for(module: nn.Module) -> dict[str, Any]:
            if isinstance(module, classes):
                return {**root_kwargs, "mixed_precision": None}
            return dict(root_kwargs)

    def visit(module: nn.Module, is_root: bool) -> int:
        """The numel this subtree's units took, building them post-order."""
        nonwrapped = sum(p.numel() for p in module.parameters() if p not in ignored.params)
        if not ask(module, True, nonwrapped):
            return 0
        taken = 0
        for _, child in module.named_children():
            if child not in ignored.modules:
                taken += visit(child, False)
        if not is_root and ask(module, False, nonwrapped - taken):
            wrap(module, **kwargs_for(module))
            return nonwrapped
        return taken

    visit(root, True)


def _as_policy(policy: Any) -> Any:
    """A predicate ``is_unit(module)`` as the policy function it means (FSDP1's
    ``lambda_auto_wrap_policy``: recurse everywhere, wrap where the predicate holds); any other
    policy as given. A predicate is a callable that takes one module and not FSDP1's call
    (``module=, recurse=, nonwrapped_numel=``), which no FSDP1 policy refuses."""
    if _is_fsdp1_code(getattr(policy, "func", policy)):
        return policy  # FSDP1's own code is read or refused (``_ask``), never called
    try:
        signature = inspect.signature(policy)
    except (TypeError, ValueError):  # not callable, or no signature to read
        return policy
    try:
        signature.bind(module=None, recurse=True, nonwrapped_numel=0)
        return policy  # FSDP1's call shape
    except TypeError:
        pass
    try:
        signature.bind(None)
    except TypeError:
        return policy
    return auto_wrap_policy(policy)


def auto_wrap_policy(is_unit: Callable[[nn.Module], bool]) -> Callable[..., bool]:
    """The predicate ``is_unit(module)`` as an ``auto_wrap_policy`` in FSDP1's call shape
    (``module=, recurse=, nonwrapped_numel=``): recurse everywhere, wrap where ``is_unit``
    holds, as ``lambda_auto_wrap_policy`` with it would. How the codemod writes a policy a
    public function returns (F2P013): right for FSDP1's constructor and for
    ``units_like_fsdp1`` alike, and still a predicate when called with the module alone."""

    def policy(module: nn.Module, recurse: bool = False, nonwrapped_numel: int = 0) -> bool:
        return recurse or bool(is_unit(module))

    return policy


def fp32_classes(mixed_precision: MixedPrecision) -> tuple[type, ...]:
    """The module classes FSDP1 makes units of their own, without mixed precision, when it
    auto-wraps under ``mixed_precision`` (``_module_classes_to_ignore``: BatchNorm's base by
    default)."""
    return tuple(set(torch_internals.mixed_precision_classes_to_ignore(mixed_precision)))


def _run_policy(
    policy: Any, root: nn.Module, ignored: Ignored, root_kwargs: dict[str, Any]
) -> dict[nn.Module, dict[str, Any]]:
    """The modules a ``_Policy`` targets, each with its kwargs (a copy of the root's, updated by
    a ``CustomPolicy``'s dict)."""
    runner = torch_internals.policy_runner(type(policy))
    targets: dict[nn.Module, dict[str, Any]] = {}
    if runner is torch_internals.policy_runner(ModuleWrapPolicy):
        classes = tuple(torch_internals.module_wrap_policy_classes(policy))
        for module in root.modules():
            if module not in ignored.modules and isinstance(module, classes):
                targets[module] = dict(root_kwargs)
        return targets
    if runner is torch_internals.policy_runner(CustomPolicy):
        choose = torch_internals.custom_policy_lambda_fn(policy)
        for module in root.modules():
            if module in ignored.modules:
                continue
            chosen = choose(module)
            if not isinstance(chosen, (dict, bool)):
                raise ValueError(
                    f"CustomPolicy's lambda_fn must return True, False or a dict of FSDP "
                    f"arguments; for {type(module).__name__} it returned {chosen!r}"
                )
            if chosen:
                targets[module] = {**root_kwargs, **(chosen if isinstance(chosen, dict) else {})}
        return targets
    if _is_fsdp1_code(runner):
        raise ValueError(
            f"auto_wrap_policy: {type(policy).__name__} is an FSDP1 policy fully_shard_like_fsdp1 "
            "does not know; select the modules with a CustomPolicy or a function"
        )
    # a _Policy of the user's own: its _run_policy is user code, called as FSDP1 calls it
    return dict(
        torch_internals.run_policy(
            policy, root_module=root, ignored_modules=ignored.modules, root_kwargs=root_kwargs
        )
    )


def _no_mixed_precision_for(
    classes: tuple[type, ...],
    root: nn.Module,
    ignored: Ignored,
    root_kwargs: dict[str, Any],
    targets: dict[nn.Module, dict[str, Any]],
) -> None:
    """Modules of ``classes`` become units without mixed precision. A module the policy did not
    pick gets the root's kwargs, and FSDP1 writes ``mixed_precision=None`` into that very dict,
    so this does too (the children's dict: the root itself keeps its own arguments)."""
    for module in root.modules():
        if module in ignored.modules or not isinstance(module, classes):
            continue
        if module not in targets:
            targets[module] = root_kwargs
        targets[module]["mixed_precision"] = None


def _wrap_post_order(root: nn.Module, targets: dict[nn.Module, dict[str, Any]], wrap: Wrap) -> None:
    seen = {root}

    def visit(module: nn.Module) -> None:
        for _, child in module.named_children():
            if child not in seen:
                seen.add(child)
                visit(child)
        if module is not root and module in targets:
            wrap(module, **targets[module])

    visit(root)


def _check_uniformly_frozen(
    root: nn.Module,
    targets: dict[nn.Module, dict[str, Any]],
    ignored_params: set[nn.Parameter],
    use_orig_params: bool,
) -> None:
    """FSDP1 refuses (``use_orig_params=False``) or warns about a ``_Policy`` unit whose
    parameters are partly frozen: each unit's own parameters, children's units first."""
    done: set[nn.Module] = set()
    for name, module in _post_order_named(root):
        if module not in targets:
            continue
        frozen: list[str] = []
        trainable: list[str] = []
        for param, fqn in _unit_params(module, name, ignored_params, done):
            (trainable if param.requires_grad else frozen).append(fqn)
        if not (frozen and trainable):
            continue
        message = (
            f"the unit {name or '<root>'} would hold parameters with requires_grad=True "
            f"({trainable}) and False ({frozen})"
        )
        if not use_orig_params:
            raise ValueError(
                f"{message}: FSDP1 refuses such a unit with use_orig_params=False. Make the "
                "frozen parameters a unit of their own (or pass use_orig_params=True)"
            )
        warnings.warn(
            f"{message}: FSDP1 warns that its gradients take memory for the frozen ones too",
            stacklevel=4,
        )


def _post_order_named(root: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every module once, each after its children, siblings in registration order."""
    order: list[tuple[str, nn.Module]] = []
    stack, seen = [("", root)], {root}
    while stack:
        name, module = stack.pop()
        order.append((name, module))
        for child_name, child in module.named_children():
            if child is not None and child not in seen:
                seen.add(child)
                stack.append((f"{name}.{child_name}" if name else child_name, child))
    order.reverse()
    return order


def _unit_params(
    module: nn.Module, name: str, ignored_params: set[nn.Parameter], done: set[nn.Module]
) -> Iterator[tuple[nn.Parameter, str]]:
    """The parameters a unit on ``module`` would hold: breadth first, not entering modules of
    the units before it (``done``, which this extends)."""
    queue = collections.deque([(module, name)])
    done.add(module)
    found: set[nn.Parameter] = set()
    while queue:
        current, prefix = queue.popleft()
        for param_name, param in current.named_parameters(recurse=False):
            if param not in ignored_params and param not in found:
                found.add(param)
                yield param, f"{prefix}.{param_name}" if prefix else param_name
        for child_name, child in current.named_children():
            if child is not None and child not in done:
                done.add(child)
                queue.append((child, f"{prefix}.{child_name}" if prefix else child_name))


# -- callables: FSDP1's policy functions read, the user's called -----------------------------------


def _module_classes(arguments: dict[str, Any], key: str) -> Any:
    return arguments["recurse"] or isinstance(arguments["module"], tuple(arguments[key]))


def _classes(arguments: dict[str, Any]) -> Any:
    return _module_classes(arguments, "module_classes")


def _lambda(arguments: dict[str, Any]) -> Any:
    return True if arguments["recurse"] else arguments["lambda_fn"](arguments["module"])


def _size_based(arguments: dict[str, Any]) -> Any:
    """Wrap once the numel not yet wrapped reaches ``min_num_params``; do not enter
    ``force_leaf_modules``, do not wrap ``exclude_wrap_modules`` (None: the defaults set on
    the function, read now, as FSDP1 reads them)."""
    leaves = arguments["force_leaf_modules"]
    if leaves is None:
        leaves = size_based_auto_wrap_policy.FORCE_LEAF_MODULES  # type: ignore[attr-defined]
    excluded = arguments["exclude_wrap_modules"]
    if excluded is None:
        excluded = size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES  # type: ignore[attr-defined]
    large = arguments["nonwrapped_numel"] >= arguments["min_num_params"]
    skip = leaves if arguments["recurse"] else excluded
    return large and not isinstance(arguments["module"], tuple(skip))


def size_based_policy(
    min_num_params: int = int(1e8),
    force_leaf_modules: set[type[nn.Module]] | None = None,
    exclude_wrap_modules: set[type[nn.Module]] | None = None,
) -> Callable[..., bool]:
    """``functools.partial(size_based_auto_wrap_policy, ...)`` without FSDP1 (how the codemod
    writes it where only ``fsdp2_port`` reads it, F2P013): a policy called as FSDP1 calls one
    (``module=, recurse=, nonwrapped_numel=``) that wraps a module once the numel not yet
    wrapped below it reaches ``min_num_params``, does not enter ``force_leaf_modules`` and
    does not wrap ``exclude_wrap_modules`` (None: FSDP1's defaults, read when it is called)."""
    return functools.partial(
        _size_based_policy,
        min_num_params=min_num_params,
        force_leaf_modules=force_leaf_modules,
        exclude_wrap_modules=exclude_wrap_modules,
    )


def _size_based_policy(
    module: nn.Module, recurse: bool, nonwrapped_numel: int, **arguments: Any
) -> bool:
    asked = {"module": module, "recurse": recurse, "nonwrapped_numel": nonwrapped_numel}
    return bool(_size_based({**asked, **arguments}))


def _or(arguments: dict[str, Any]) -> Any:
    asked = (arguments["module"], arguments["recurse"], arguments["nonwrapped_numel"])
    return any(_ask(policy, *asked) for policy in arguments["policies"])


@functools.cache
def _known_functions() -> tuple[tuple[Callable[..., Any], Callable[[dict[str, Any]], Any]], ...]:
    """FSDP1's policy functions and what each means on its bound arguments."""
    return (
        (always_wrap_policy, lambda a: True),
        (transformer_auto_wrap_policy, lambda a: _module_classes(a, "transformer_layer_cls")),
        (torch_internals.load("module_wrap_policy"), _classes),
        (torch_internals.load("wrap_module_cls_individually"), _classes),
        (lambda_auto_wrap_policy, _lambda),
        (size_based_auto_wrap_policy, _size_based),
        (torch_internals.load("or_policy"), _or),
    )


@functools.cache
def _signature(function: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(function)


def _ask(policy: Any, module: nn.Module, recurse: bool, nonwrapped_numel: int) -> Any:
    """``policy(module=module, recurse=recurse, nonwrapped_numel=nonwrapped_numel)`` as FSDP1
    calls it; FSDP1's own policies are evaluated here instead of called."""
    if isinstance(policy, ModuleWrapPolicy) and type(policy).__call__ is ModuleWrapPolicy.__call__:
        classes = tuple(torch_internals.module_wrap_policy_classes(policy))
        return recurse or isinstance(module, classes)
    function, args, keywords = policy, (), {}
    if type(policy) is functools.partial:
        function, args, keywords = policy.func, policy.args, policy.keywords
    meaning = next((m for f, m in _known_functions() if f is function), None)
    if meaning is not None:
        asked = {"module": module, "recurse": recurse, "nonwrapped_numel": nonwrapped_numel}
        bound = _signature(function).bind(*args, **{**keywords, **asked})
        bound.apply_defaults()
        return meaning(bound.arguments)
    if _is_fsdp1_code(function):
        name = getattr(function, "__qualname__", type(function).__qualname__)
        raise ValueError(
            f"auto_wrap_policy: {name} is FSDP1 code fully_shard_like_fsdp1 does not know, and "
            "it will not run FSDP1 code; select the modules with a CustomPolicy or a function"
        )
    return policy(module=module, recurse=recurse, nonwrapped_numel=nonwrapped_numel)


def _is_fsdp1_code(function: object) -> bool:
    """Defined in FSDP1's modules (``torch.distributed.fsdp``, FSDP2's ``_fully_shard`` aside)."""
    module = getattr(function, "__module__", None) or ""
    return module.startswith("torch.distributed.fsdp") and not module.startswith(
        "torch.distributed.fsdp._fully_shard"
    )


# -- mixed precision's fp32 modules ---------------------------------------------------------------

#: Per module run in fp32: the dtype its floating inputs had when last cast (FSDP1 keeps the same
#: record, and also writes it when it casts an output back, so this does too).
_INPUT_DTYPES: weakref.WeakKeyDictionary[nn.Module, torch.dtype] = weakref.WeakKeyDictionary()


def _run_in_fp32(classes: tuple[type, ...], root: nn.Module) -> None:
    """Hooks on every module of ``classes`` under ``root`` (ignored ones too, as FSDP1): inputs
    cast to fp32, outputs back to the inputs' dtype; appended after the module's other hooks."""
    found: set[str] = set()
    for module in root.modules():
        if isinstance(module, classes):
            found.add(type(module).__name__)
            module.register_forward_pre_hook(_inputs_to_fp32, prepend=False)
            module.register_forward_hook(_output_to_input_dtype, prepend=False)
    if found:
        warnings.warn(
            f"mixed_precision with an auto_wrap_policy: the {sorted(found)} modules become "
            "units of their own without mixed precision and run in fp32, as FSDP1 does",
            stacklevel=4,
        )


def _cast(dtype: torch.dtype, module: nn.Module, tensor: Tensor) -> Tensor:
    if not torch.is_floating_point(tensor) or tensor.dtype == dtype:
        return tensor
    _INPUT_DTYPES[module] = tensor.dtype
    return tensor.to(dtype)


def _inputs_to_fp32(module: nn.Module, args: Any) -> Any:
    return _apply_to_tensors(functools.partial(_cast, torch.float32, module), args)


def _output_to_input_dtype(module: nn.Module, args: Any, output: Any) -> Any:
    if module not in _INPUT_DTYPES:
        return None  # no floating input was cast: the output stays as it is
    cast = functools.partial(_cast, _INPUT_DTYPES[module], module)
    return _apply_to_tensors(cast, output)


def _apply_to_tensors(fn: Callable[[Tensor], Any], container: Any) -> Any:
    """``fn`` on every tensor in nested containers, rebuilt (torch's own traversal, which FSDP1
    and FSDP2 use for their casts)."""
    return torch_internals.call("apply_to_tensors", fn=fn, container=container)


# -- meta-device and deferred init ---------------------------------------------------------------


def needs_materialization(module: nn.Module, ignored: Ignored) -> tuple[bool, bool]:
    """FSDP1's test for one unit: (a managed parameter or a buffer outside ignored modules is on
    the meta device, a managed parameter is a torchdistX fake)."""
    managed = [
        p
        for p in module.parameters()
        if p not in ignored.params and not torch_internals.is_fsdp1_flattened(p)
    ]
    is_meta = any(p.is_meta for p in managed) or any(
        b.is_meta
        for m in module.modules()
        if m not in ignored.modules
        for b in m.buffers(recurse=False)
    )
    fake = _torchdistx_fake()
    is_deferred = not is_meta and fake is not None and any(fake.is_fake(p) for p in managed)
    return is_meta, is_deferred


@functools.cache
def _torchdistx_fake() -> Any:
    """torchdistX's ``fake`` module where torchdistX is installed (FSDP1's condition), else
    None."""
    try:
        importlib.import_module("torchdistx.deferred_init")
        return importlib.import_module("torchdistx.fake")
    except ImportError:
        return None


def modules_to_materialize(module: nn.Module, stop: set[nn.Module]) -> list[nn.Module]:
    """The unit's modules breadth first, not entering ``stop`` (units built, ignored modules)."""
    found, queue, seen = [], collections.deque([module]), {module}
    while queue:
        current = queue.popleft()
        found.append(current)
        for child in current.children():
            if child not in seen and child not in stop:
                seen.add(child)
                queue.append(child)
    return found


def materialize(
    module: nn.Module,
    stop: set[nn.Module],
    param_init_fn: Callable[[nn.Module], None] | None,
    device: torch.device,
) -> None:
    """FSDP1's materialisation of a unit that needs it: ``param_init_fn(m)`` for each module, or
    ``m.to_empty(device, recurse=False); m.reset_parameters()`` for each module holding
    parameters or buffers of its own, breadth first (so the RNG is drawn in FSDP1's order)."""
    modules = modules_to_materialize(module, stop)
    if param_init_fn is not None:
        if not callable(param_init_fn):
            raise ValueError(f"param_init_fn must be callable, not {type(param_init_fn)}")
        for m in modules:
            param_init_fn(m)
        return
    current: nn.Module | None = None
    try:
        with torch.no_grad():
            for current in modules:
                if any(True for _ in current.parameters(recurse=False)) or any(
                    True for _ in current.buffers(recurse=False)
                ):
                    current.to_empty(device=device, recurse=False)
                    current.reset_parameters()  # type: ignore[operator]
    except BaseException as e:
        warnings.warn(
            f"materialising a meta-device {type(current).__name__} failed ({e}): a module "
            "holding parameters or buffers must implement reset_parameters(), or pass "
            "param_init_fn",
            stacklevel=3,
        )
        raise
