"""The first code a sandboxed child runs, still trusted: it walls the process in before any student
code exists in it.

Called in a child just forked from the single-threaded fork server (grader.zygote; safe, unlike a
preexec_fn in a threaded grader), it joins the child's pids cgroup, sets resource limits, and, where
the platform allows, moves into new mount and network namespaces where the course directory, the
submissions, the results and the home directory are hidden (only the Python installation and the
grader package are bound back, read-only), then drops to an unprivileged user. What it actually
achieved becomes the child's first protocol message, so each result can say which isolation was in
force.
"""
from __future__ import annotations

import ctypes
import os
import resource

CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWUSER = 0x00020000, 0x40000000, 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38
# World-writable places: covered, so that a child writes nowhere but its own work dir.
SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")

_libc = ctypes.CDLL(None, use_errno=True)


def _call(name: str, *args) -> None:
    if getattr(_libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: s.encode() if s is not None else None)
    _call("mount", enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))


def _tasks_of_this_uid() -> int:
    """Processes and threads the current uid runs besides this one: RLIMIT_NPROC counts them all, so a
    grader run by a user with a busy desktop must allow for them (a uid of its own has none)."""
    uid, me, count = os.getuid(), str(os.getpid()), 0
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and entry != me and os.stat(f"/proc/{entry}").st_uid == uid:
                count += len(os.listdir(f"/proc/{entry}/task"))
        except OSError:
            pass
    return count


def _limits(config: dict) -> dict:
    wanted = {
        "address_space_mb": (resource.RLIMIT_AS, config["memory_mb"] * 2**20),
        "cpu_seconds": (resource.RLIMIT_CPU, config["cpu_seconds"]),
        "file_size_mb": (resource.RLIMIT_FSIZE, config["file_size_mb"] * 2**20),
        "processes": (resource.RLIMIT_NPROC, config["processes"] + _tasks_of_this_uid()),
        "open_files": (resource.RLIMIT_NOFILE, 256),
        "core_dumps": (resource.RLIMIT_CORE, 0),
    }
    applied = {}
    for name, (which, value) in wanted.items():
        resource.setrlimit(which, (value, value))
        applied[name] = value // 2**20 if name.endswith("_mb") else value
    applied["processes"] = config["processes"]  # beyond those the uid already ran
    return applied


def _untraversable(expose: list[str]) -> list[str]:
    """Ancestors of exposed paths that an unprivileged user cannot enter (e.g. /root, mode 700 here,
    which holds the Python installation): covering them and binding the exposed paths back makes
    Python importable for `nobody` without opening the rest of the folder."""
    found = set()
    for path in expose:
        parent = os.path.dirname(path)
        while parent not in ("/", ""):
            if not os.stat(parent).st_mode & 0o001:
                found.add(parent)
            parent = os.path.dirname(parent)
    return sorted(found)


def _hide(hide: list[str], expose: list[str], writable: list[str]) -> None:
    """Cover every path in `hide`, then bind each `expose` path that lay beneath one back read-only, and
    each `writable` path (the work dir) back as it was.

    The paths to bring back are opened before anything is covered and bound again from their open
    descriptors, so no staging place outside the walls is needed.
    """
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    hide = sorted(set(hide) | set(_untraversable(expose + writable)))
    keep = [(path, path in writable) for path in expose + writable
            if any(path == h or path.startswith(h.rstrip("/") + "/") for h in hide)]
    held = [(os.open(path, os.O_PATH), path, rw) for path, rw in keep]
    for path in sorted(hide, key=len):
        if os.path.isdir(path):
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m")
        elif os.path.exists(path):
            _mount("/dev/null", path, None, MS_BIND)
    for fd, path, rw in held:
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        if not rw:
            _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_REC)
        os.close(fd)


def _namespaces(config: dict) -> tuple[str, str, str]:
    """(user, network, filesystem) as achieved, most isolating first."""
    uid, gid = os.getuid(), os.getgid()
    try:
        if uid == 0:
            _call("unshare", CLONE_NEWNS | CLONE_NEWNET)
        else:
            _call("unshare", CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET)
            for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
    except OSError as exc:
        return "same user", f"not isolated ({exc.strerror})", f"not isolated ({exc.strerror})"
    network = "none: a new network namespace with no interface up"
    try:
        _hide(config["hide"] + [p for p in SHARED_WRITABLE if os.path.isdir(p)], config["expose"],
              [config["workdir"]])
        filesystem = ("course, submissions, results and home directories hidden, nothing writable but the "
                      "work dir (mount namespace)")
    except OSError as exc:
        filesystem = f"not isolated ({exc})"
    user = "same user (inside a user namespace)" if uid else "same user"
    if uid == 0:
        os.setgroups([])
        os.setgid(config["uid"])
        os.setuid(config["uid"])
        user = "an unprivileged uid of its own (no other process, no file belongs to it)"
    return user, network, filesystem


def wall(config: dict) -> dict:
    """Wall the calling process in, irreversibly, and say what was achieved."""
    report = {}
    cgroup = config.get("cgroup")
    if cgroup:
        try:
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
            report["pids_cgroup"] = f"pids.max={config['processes']}"
        except OSError as exc:
            report["pids_cgroup"] = f"not available ({exc.strerror})"
    report["user"], report["network"], report["filesystem"] = _namespaces(config)
    report["limits"] = _limits(config)
    _call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    os.chdir(config["workdir"])
    return report
