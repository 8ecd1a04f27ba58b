"""Runtime detection of autograd inside the sandboxed child: the second layer behind the static check.

Every public way into autograd (reverse mode, torch.func, torch.autograd.functional, forward-mode dual
numbers) is wrapped so that a call is recorded, with its name, before it proceeds; after each cell any
tensor left in the cell's namespace that requires grad or carries a graph is recorded too. A
TorchDispatchMode over every operation would see the same, but it cost ~0.8 s per submission here
(measured: 77 ms per pass over the 28 cells, against 0.3 ms without it), so the wrappers sit on the
entry points instead. The third layer is the grader's LOCAL check, which an answer recomputed with
autograd fails whatever route it took.
"""
from __future__ import annotations

ENTRY_POINTS = {
    "torch": ("_make_dual",),
    "torch.autograd": ("grad", "backward"),
    "torch.autograd.functional": ("vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"),
    "torch.autograd.forward_ad": ("make_dual", "dual_level"),
    "torch.func": ("grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "linearize"),
}


class Watch:
    def __init__(self):
        self.evidence: list[str] = []

    def _wrap(self, owner, name: str, label: str):
        original = getattr(owner, name)
        evidence = self.evidence

        def watched(*args, **kwargs):
            evidence.append(f"called {label}")
            return original(*args, **kwargs)

        setattr(owner, name, watched)

    def install(self) -> "Watch":
        import importlib

        import torch

        for module_name, names in ENTRY_POINTS.items():
            module = importlib.import_module(module_name)
            for name in names:
                if hasattr(module, name):
                    self._wrap(module, name, f"{module_name}.{name}")
        self._wrap(torch.Tensor, "backward", "Tensor.backward")
        self._wrap(torch.Tensor, "requires_grad_", "Tensor.requires_grad_")
        return self

    def take(self, namespace: dict) -> list[str]:
        """What the last cell did with autograd, and forget it."""
        import torch

        found = list(dict.fromkeys(self.evidence))
        for name, value in namespace.items():
            if type(value) is torch.Tensor and (value.requires_grad or value.grad_fn is not None):
                found.append(f"the tensor {name} requires grad or carries an autograd graph")
        self.evidence.clear()
        return found[:5]
