"""A normal unix user for the tests, the way most instructors and every JupyterHub run the grader: no
root, no cgroup of its own, its files beside the grader's.

CI runs as root, so the user is made here (useradd -m) and removed afterwards (userdel -r). Python
lives under /root (pyenv), mode 700: the user gets traverse permission on /root for as long as it
exists, and the mode is put back after. Commands run as the user through setpriv, which execs the
command in place: its pid is the one the caller started, and nothing else of root stays behind.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: Path

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run as this user, with only its own groups."""
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups", "--", *argv]

    def env(self, **extra: str) -> dict[str, str]:
        """A login-like environment for the user (no root's HOME, no root's virtual environment)."""
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.home), "USER": self.name,
                "LOGNAME": self.name, "LANG": "C.UTF-8", **extra}

    def run(self, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        kwargs.setdefault("env", self.env())
        kwargs.setdefault("cwd", self.home)
        return subprocess.run(self.command(argv), **kwargs)

    def popen(self, argv: list[str], **kwargs) -> subprocess.Popen:
        kwargs.setdefault("env", self.env())
        kwargs.setdefault("cwd", self.home)
        return subprocess.Popen(self.command(argv), **kwargs)

    def give(self, path: Path) -> Path:
        """Make `path` and everything under it the user's own (it does not follow symbolic links)."""
        for root, dirs, files in os.walk(path):
            for name in (root, *(os.path.join(root, f) for f in dirs + files)):
                os.lchown(name, self.uid, self.gid)
        return path

    def venv(self) -> Path:
        """A virtual environment of the user's own that imports this checkout's grader, as a user who ran
        `pip install -e` would have; its `bin/backprop-ninja` is the grader's command."""
        import grader

        checkout = Path(grader.__file__).resolve().parents[1]
        base = getattr(sys, "_base_executable", sys.executable)
        venv = self.home / "venv"
        self.run([base, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True,
                 capture_output=True)
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        (venv / "lib" / version / "site-packages" / "checkout.pth").write_text(f"{checkout}\n")
        # Jupyter's data files (nbconvert's templates, which nbgrader's feedback extends) as pip would have
        # installed them into the environment: a --system-site-packages venv looks only under its own prefix.
        shared = Path(sys.base_prefix) / "share" / "jupyter"
        if shared.is_dir():
            (venv / "share").mkdir(exist_ok=True)
            (venv / "share" / "jupyter").symlink_to(shared, target_is_directory=True)
        script = venv / "bin" / "backprop-ninja"
        script.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom grader.cli import main\nsys.exit(main())\n")
        script.chmod(0o755)
        self.give(venv)
        return venv


def _root_traversable() -> int | None:
    """Give others traverse permission on the home of root (where pyenv keeps Python); the mode to put
    back, or None when nothing was changed."""
    root = Path(pwd.getpwuid(0).pw_dir)
    mode = root.stat().st_mode & 0o7777
    if mode & 0o001:
        return None
    root.chmod(mode | 0o001)
    return mode


# Who holds root's home traversable, shared by the processes of one test run (pytest-xdist's workers): the
# mode it had before the first hold, and the pids holding it. The last to let go puts the mode back, so a
# worker that finishes early never locks out another worker's user.
_HOLDS = Path(tempfile.gettempdir()) / "bpn-tests-root-traversable.json"


@contextlib.contextmanager
def _holds():
    with open(_HOLDS.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = json.loads(_HOLDS.read_text()) if _HOLDS.exists() else {"mode": None, "holders": []}
        state["holders"] = [pid for pid in state["holders"] if os.path.exists(f"/proc/{pid}")]
        yield state
        if state["holders"]:
            _HOLDS.write_text(json.dumps(state))
        else:
            if state["mode"] is not None:
                Path(pwd.getpwuid(0).pw_dir).chmod(state["mode"])
            _HOLDS.unlink(missing_ok=True)


def hold_root_traversable(*, again: bool = False) -> None:
    """Make root's home traversable for this process, as one more hold; `again`: no new hold, only the
    permission given back if a test put a mode back meanwhile."""
    with _holds() as state:
        mode = _root_traversable()
        if mode is not None and state["mode"] is None:
            state["mode"] = mode
        if not again or os.getpid() not in state["holders"]:
            state["holders"].append(os.getpid())


def release_root_traversable() -> None:
    """Let go of one of this process's holds."""
    with _holds() as state:
        if os.getpid() in state["holders"]:
            state["holders"].remove(os.getpid())


def processes_of(uid: int) -> list[int]:
    """Pids of the processes running as `uid` (the owner of their /proc entry: the effective uid)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                found.append(int(entry))
        except OSError:
            pass
    return found


def create(prefix: str = "bpn") -> User:
    """A fresh user with a home directory of its own. Only root can do this."""
    if os.getuid() != 0:
        raise PermissionError("creating a user needs root")
    name = f"{prefix}{secrets.token_hex(3)}"
    subprocess.run(["useradd", "-m", "-s", "/bin/sh", "-U", name], check=True, capture_output=True)
    entry = pwd.getpwnam(name)
    return User(name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))


def remove(user: User) -> None:
    """Kill whatever the user still runs, then delete it and its home."""
    for pid in processes_of(user.uid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    subprocess.run(["userdel", "-r", "-f", user.name], capture_output=True)
    shutil.rmtree(user.home, ignore_errors=True)


class Session:
    """A user for a test session (`.user`): made on enter (with /root made traversable), removed on exit
    (the mode of /root restored once no process of the run holds it)."""

    def __init__(self, prefix: str = "bpn"):
        self.prefix = prefix
        self.user: User | None = None

    def __enter__(self) -> Session:
        hold_root_traversable()
        self.user = create(self.prefix)
        return self

    def keep_root_traversable(self) -> None:
        """Give traverse permission on /root again if something took it away meanwhile: without it the
        user cannot start Python at all."""
        hold_root_traversable(again=True)

    def __exit__(self, *exc) -> None:
        if self.user is not None:
            remove(self.user)
        release_root_traversable()
