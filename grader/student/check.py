"""What a check cell imports: `from grader.student.check import check`, then `check("dx")`.

The cell runs in every state of the kernel, a restarted one too, where the setup cells have not run
and torch is not imported: there the check says to run the setup, and imports nothing heavy (torch
and the judge took 6-13 s to import on a loaded machine, for a line that needs neither). Once the
setup has run (the notebook's COURSE is set), it hands the notebook's namespace to the self-check
itself, grader.student.selfcheck. The self-check records each cell after it runs (IPython's events),
so it is imported as soon as the notebook has imported torch: by the setup's own import of this
module, or else after the first cell that imports torch.

Everything else the self-check offers (SelfCheck, for the notebooks of grader 0.1 and 0.2, which build
one) is reached through this module too.
"""
from __future__ import annotations

import sys

from grader.vocabulary import SETUP_FIRST


def _selfcheck():
    from grader.student import selfcheck
    return selfcheck


def _set_up(namespace: dict, label: str) -> bool:
    """Whether the notebook's setup has run; if not, the line that says so."""
    if isinstance(namespace.get("COURSE"), dict):
        return True
    # Loaded before: the setup ran, and a cell may have cleared it (%reset), which the self-check names
    loaded = sys.modules.get("grader.student.selfcheck")
    print(f"{label:<15s}| not checked: {(loaded.cleared(namespace) if loaded else '') or SETUP_FIRST}")
    return False


class _Check:
    """`check("dx")`, with a function's `answers=` and `gradients_of=`; `check.training(...)` for the
    whole-run check. Both read the notebook's values by name from the caller's globals."""

    def __call__(self, *args, **kwargs) -> None:
        # A check cell edited to call it otherwise (`check()`, a student trial's) says so: it never raises
        if len(args) != 1 or not isinstance(args[0], str) or set(kwargs) - {"answers", "gradients_of"}:
            print(f"{'check':<15s}| not checked: {EDITED}")
            return
        namespace = sys._getframe(1).f_globals
        if _set_up(namespace, args[0]):
            print(_selfcheck().check.line(args[0], namespace, kwargs.get("answers"), kwargs.get("gradients_of")))

    def training(self, *args, **kwargs) -> None:
        if args or set(kwargs) != {"start", "batches", "lr"}:
            print(f"{'training':<15s}| not checked: {EDITED}")
            return
        namespace = sys._getframe(1).f_globals
        if _set_up(namespace, "training"):
            _selfcheck().check.training(namespace, **kwargs)


EDITED = ("this check cell calls check otherwise than as released (check(\"NAME\"), NAME an answer's name): "
          "restore it from the released notebook")


check = _Check()


def __getattr__(name: str):
    if name.startswith("__"):  # the import system asks for `__path__` (is this a package?): no need to load it
        raise AttributeError(name)
    return getattr(_selfcheck(), name)


def _wake(_result=None) -> None:
    """After a cell: once torch is imported, the self-check starts recording the cells (it adds its own
    listeners), and this one stops."""
    if "torch" not in sys.modules:
        return
    try:
        _selfcheck()
        sys.modules["IPython"].get_ipython().events.unregister("post_run_cell", _wake)
    except Exception:  # noqa: S110 - a listener's error would print under the student's cell; the check cell says it
        pass


def _listen() -> None:
    if "torch" in sys.modules:
        _selfcheck()  # the setup's import: the self-check records every cell from here
        return
    ipython = sys.modules.get("IPython")  # a kernel has it imported already
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None and _wake not in shell.events.callbacks["post_run_cell"]:
        shell.events.register("post_run_cell", _wake)


_listen()
