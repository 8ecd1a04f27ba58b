"""Runtime signals of autograd inside the sandboxed child, behind the static check and inference mode.

Every public way into autograd (reverse mode, torch.func, torch.autograd.functional, forward-mode dual
numbers, the engine call they all end in) and every way out of inference mode is wrapped so that a call
raises an audit event (`sys.audit`) before it proceeds; the child's audit hook sends it to the parent at
once. The wrappers keep no record of their own, so there is nothing for a cell to empty, and they hold
the function they wrap only as a constant of their code object: no closure, no defaults, an empty
globals dict. Reading a function's `__code__` raises an audit event itself, so the original cannot be
fetched from a wrapper without the parent hearing of it first.

After each cell any tensor left in its namespace that requires grad or carries a graph is reported too.
A TorchDispatchMode over every operation would see more, but it cost ~0.8 s per submission here
(measured: 77 ms per pass over the 28 cells, against 0.3 ms without it), so the wrappers sit on the
entry points instead. The grader's LOCAL check is the last layer: an answer recomputed from the true
chain fails it whatever route it took.
"""
from __future__ import annotations

import sys
import types

AUTOGRAD_EVENT = "backprop-ninja.autograd"

ENTRY_POINTS = {
    "torch": ("_make_dual",),
    "torch.autograd": ("grad", "backward", "_engine_run_backward"),
    "torch.autograd.graph": ("_engine_run_backward",),
    "torch.autograd.functional": ("vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"),
    "torch.autograd.forward_ad": ("make_dual", "dual_level"),
    "torch.func": ("grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "linearize"),
}


def _not(mode=True, *args, **kwargs) -> bool:
    return not mode


def _truthy(mode=False, *args, **kwargs) -> bool:
    return bool(mode)


def _sets_true(tensor, value=False, *args, **kwargs) -> bool:
    return bool(value)


# Calls that change autograd's mode, reported only in the direction that could help a cell: leaving
# inference mode, or switching grad recording on (which inside inference mode records nothing).
MODE_SWITCHES = {
    ("torch._C", "_InferenceMode"): ("left inference mode", _not),
    ("torch._C", "_set_grad_enabled"): ("switched grad recording on", _truthy),
}
# Ways around the child's own walls that raise no audit event of their own in Python 3.11: a new thread
# starts outside inference mode, and a signal handler is handed the running frame.
UNAUDITED = {
    ("_thread", "start_new_thread"): "_thread.start_new_thread",
    ("threading", "_start_new_thread"): "_thread.start_new_thread",
    ("signal", "signal"): "signal.signal",
    ("_signal", "signal"): "signal.signal",
}


def _template(*args, **kwargs):
    audit = "\0audit"  # one constant a line: a tuple of them would be folded into one constant
    event = "\0event"
    label = "\0label"
    when = "\0when"
    original = "\0original"
    if when is None or when(*args, **kwargs):
        audit(event, label)
    return original(*args, **kwargs)


def _wrapper(original, event: str, label: str, when=None):
    """A function that raises `event` with `label` (when `when(*args)` says so) and calls `original`;
    both live only among its code's constants."""
    slots = {"\0audit": sys.audit, "\0event": event, "\0label": label, "\0when": when, "\0original": original}
    code = _template.__code__
    code = code.replace(co_consts=tuple(slots.get(c, c) if isinstance(c, str) else c for c in code.co_consts),
                        co_name=getattr(original, "__name__", label))
    wrapped = types.FunctionType(code, {"__builtins__": {}})
    wrapped.__doc__ = getattr(original, "__doc__", None)
    return wrapped


def _replace(owner, name: str, event: str, label: str, when=None) -> None:
    if hasattr(owner, name):
        setattr(owner, name, _wrapper(getattr(owner, name), event, label, when))


def install() -> None:
    """Wrap every entry point, once, in the child before any student code runs."""
    import importlib

    import torch

    for module_name, names in ENTRY_POINTS.items():
        module = importlib.import_module(module_name)
        for name in names:
            _replace(module, name, AUTOGRAD_EVENT, f"called {module_name}.{name}")
    _replace(torch.Tensor, "backward", AUTOGRAD_EVENT, "called Tensor.backward")
    _replace(torch.Tensor, "requires_grad_", AUTOGRAD_EVENT, "called Tensor.requires_grad_")
    flag = torch._C.TensorBase.requires_grad
    torch.Tensor.requires_grad = property(
        flag.__get__, _wrapper(flag.__set__, AUTOGRAD_EVENT, "set requires_grad", _sets_true), doc=flag.__doc__)
    for (module_name, name), (label, when) in MODE_SWITCHES.items():
        _replace(importlib.import_module(module_name), name, AUTOGRAD_EVENT, label, when)
    for (module_name, name), event in UNAUDITED.items():
        _replace(importlib.import_module(module_name), name, event, name)


def leftovers(namespace: dict) -> list[str]:
    """What a cell left behind that only autograd makes."""
    import torch

    found = []
    if torch.is_grad_enabled() or not torch.is_inference_mode_enabled():
        found.append("left inference mode")
    for name, value in namespace.items():
        if type(value) is torch.Tensor and (value.requires_grad or value.grad_fn is not None):
            found.append(f"the tensor {name} requires grad or carries an autograd graph")
    return found
