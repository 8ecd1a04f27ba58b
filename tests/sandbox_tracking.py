"""The sandbox's leftovers, tracked: tests that start children record the work dirs and pids cgroups the
sandbox makes, and remove any a run leaves behind."""
from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

import pytest

from grader import sandbox


@contextlib.contextmanager
def tracked_children():
    """Record the work dirs and pids cgroups the sandbox makes; yield them; remove what is left."""
    made = []
    real_mkdtemp, real_cgroup = tempfile.mkdtemp, getattr(sandbox, "_cgroup", None)

    def mkdtemp(*args, **kwargs):
        path = real_mkdtemp(*args, **kwargs)
        if Path(path).name.startswith("bpn-child-"):
            made.append(Path(path))
        return path

    def cgroup(*args, **kwargs):
        path = real_cgroup(*args, **kwargs)
        if path is not None:
            made.append(Path(path))
        return path

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sandbox.tempfile, "mkdtemp", mkdtemp)
        if real_cgroup is not None:
            mp.setattr(sandbox, "_cgroup", cgroup)
        try:
            yield made
        finally:
            mp.undo()
            for path in made:
                if str(path).startswith("/sys/fs/cgroup/"):
                    with contextlib.suppress(OSError):
                        path.rmdir()
                else:
                    shutil.rmtree(path, ignore_errors=True)
