"""The first code a sandboxed child runs, still trusted: it walls the process in before any student
code exists in it, then proves each wall by trying what it forbids.

Called in a child just forked from the single-threaded fork server (grader.sandbox.zygote; safe, unlike a
preexec_fn in a threaded grader). The walls go up in this order, each a step that later ones cannot
undo and that needs what earlier ones leave:

1. cgroup: the child joins its own pids and memory cgroups (root only);
2. namespaces: new mount, network, IPC and PID namespaces (as root, or inside a user namespace where
   the host allows one), where the course, submissions, results and home folders are covered; the
   process forks once into the PID namespace, whose first process (pid 1) carries on with the walls
   and the student code, while the one that forked only waits for it and ends the same way;
3. unprivileged: as root it drops to a uid of its own; in a user namespace it keeps its own uid;
   every capability and the bounding set are dropped; uid 0 never runs student code;
4. limits: resource limits on data memory, CPU time, file size, processes and open files;
5. landlock: reads only what the child needs, writes nothing (grader.sandbox.landlock);
6. seccomp: no new program, process, socket, SysV IPC object, POSIX message queue, foreign signal or namespace
   (grader.sandbox.seccomp).

Then every wall is probed: the report says, wall by wall, only what a probe saw refused or in force.
A wall the course requires (course.yml `sandbox.require`) that did not hold makes the child refuse
before any student code runs: the grader stops with the one line `refusal` gives.
"""
from __future__ import annotations

import ctypes
import errno
import os
import resource
import select
import signal
import sys

from grader.limits import WALLS
from grader.sandbox import landlock, seccomp

CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x40000000, 0x08000000, 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_FS, SIGCHLD = 0x00000200, 17
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 1, 24, 47, 4
CAPABILITY_VERSION_3 = 0x20080522
PTRACE_PEEKDATA = 2
NO_SUCH_PID = 0x3FFFFFFF  # above any pid_max: only a filter answers anything but ESRCH
STACK_BYTES = 64 << 20
# World-writable places: covered, so that even without Landlock a child writes nowhere but its work dir.
SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")

HOW = {
    "cgroup": "run the grader as root on a host with the cgroup v1 pids and memory controllers mounted under "
              "/sys/fs/cgroup",
    "network": "run the grader as root, or allow unprivileged user namespaces (sysctl "
               "kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu 24.04; --security-opt seccomp=unconfined "
               "or a profile allowing unshare in Docker)",
    "unprivileged": "run the grader as a normal user, or as root with CAP_SETUID, CAP_SETGID and CAP_SETPCAP",
    "limits": "run the grader where setrlimit may lower its limits (any normal Linux process may)",
    "landlock": "use Linux 5.13+ with landlock in the active LSMs (the lsm= boot parameter, see "
                "/sys/kernel/security/lsm); in a container, a seccomp profile that allows the landlock_* calls",
    "seccomp": "use a Linux kernel built with CONFIG_SECCOMP_FILTER; in a container, one that allows a process "
               "to add its own seccomp filter",
}
HOW["ipc"] = HOW["pid"] = HOW["filesystem"] = HOW["network"]
# Said of a wall whose namespace was made but whose covering did not hold: nothing on the host enables it.
NOT_THE_HOST = "the namespaces were made, so no host setting helps: report this line to the grader's maintainers"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _call(name: str, *args) -> None:
    if getattr(_libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(s: str | None) -> bytes | None:
        return s.encode() if s is not None else None

    _call("mount", enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))


def _tasks_of_uid(uid: int) -> int:
    """Processes and threads `uid` runs besides this one: RLIMIT_NPROC counts them all, so a grader run
    by a user with a busy desktop must allow for them (a uid of its own has none). Counted before the
    PID namespace's own /proc replaces the host's, which would show none of them."""
    me, count = str(os.getpid()), 0
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and entry != me and os.stat(f"/proc/{entry}").st_uid == uid:
                count += len(os.listdir(f"/proc/{entry}/task"))
        except OSError:
            pass
    return count


def _mapped_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def _limits(config: dict, other_tasks: int) -> dict:
    """RLIMIT_DATA counts the private writable memory the child maps from now on, not the libraries a
    torch build maps (a CUDA build maps gigabytes of address space at import, which killed every child
    under an address-space limit): what it already holds plus memory_mb."""
    data = _mapped_kb("VmData") * 1024 + config["memory_mb"] * 2**20
    soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
    stack = STACK_BYTES if soft == resource.RLIM_INFINITY else min(soft, STACK_BYTES)
    wanted = {
        "data_mb": (resource.RLIMIT_DATA, data),
        "stack_mb": (resource.RLIMIT_STACK, stack),
        "cpu_seconds": (resource.RLIMIT_CPU, config["cpu_seconds"]),
        "file_size_mb": (resource.RLIMIT_FSIZE, config["file_size_mb"] * 2**20),
        "processes": (resource.RLIMIT_NPROC, config["processes"] + other_tasks),
        "open_files": (resource.RLIMIT_NOFILE, 256),
        "core_dumps": (resource.RLIMIT_CORE, 0),
    }
    applied = {}
    for name, (which, value) in wanted.items():
        resource.setrlimit(which, (value, value))
        applied[name] = value // 2**20 if name.endswith("_mb") else value
    applied["data_mb"] = config["memory_mb"]  # beyond what the child held from the fork server
    applied["processes"] = config["processes"]  # beyond those the uid already ran
    return applied


def _untraversable(expose: list[str]) -> list[str]:
    """Ancestors of exposed paths that an unprivileged user cannot enter (e.g. /root, mode 700 here,
    which holds the Python installation): covering them and binding the exposed paths back makes
    Python importable for `nobody` without opening the rest of the folder.

    A folder inside another exposed path is left alone: that path comes back whole, and covering the
    folder again would hide the package beneath it (a graders' environment readable by the staff group
    only, every folder in it closed to others, left the child no grader to import)."""
    found = set()
    for path in expose:
        parent = os.path.dirname(path)
        while parent not in ("/", ""):
            if not os.stat(parent).st_mode & 0o001 and not any(_within(parent, e) for e in expose):
                found.add(parent)
            parent = os.path.dirname(parent)
    return sorted(found)


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _cover(path: str) -> None:
    if os.path.isdir(path):
        _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m")
    elif os.path.exists(path):
        _mount("/dev/null", path, None, MS_BIND)


def _hide(hide: list[str], expose: list[str], workdir: str, size_mb: int) -> None:
    """Cover every path in `hide`, bind each `expose` path that lay beneath one back read-only, and put a
    tmpfs of `size_mb` at the work dir: where Landlock is missing, what the child writes stays off the
    host's disk and within that size.

    The paths to bring back are opened before anything is covered and bound again from their open
    descriptors, so no staging place outside the walls is needed. A hidden path inside an exposed one
    (an installed package's grader/course_data inside the grader package, in a virtual environment
    under /tmp or a home) is covered again after the binding, which brings back the whole exposed tree.
    """
    owner = os.stat(workdir)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    hide = sorted(set(hide) | set(_untraversable(expose + [workdir])))
    held = [(os.open(path, os.O_PATH), path) for path in expose if any(_within(path, h) for h in hide)]
    inside = [path for path in hide if any(_within(path, e) and path != e for e in expose)]
    for path in sorted(hide, key=len):
        _cover(path)
    for fd, path in held:
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_REC)
        os.close(fd)
    for path in sorted(inside, key=len):
        _cover(path)
    os.makedirs(workdir, exist_ok=True)
    _mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV,
           f"mode=700,size={size_mb}m,uid={owner.st_uid},gid={owner.st_gid}")


def _namespace_ids() -> dict[str, str]:
    return {kind: os.readlink(f"/proc/self/ns/{kind}") for kind in ("net", "ipc", "mnt")}


def _cgroups(config: dict, walls: dict, missing: dict) -> None:
    joined = []
    for path in config.get("cgroups") or []:
        try:
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
            joined.append(path)
        except OSError as exc:
            missing["cgroup"] = f"could not join {path} ({exc.strerror})"
            return
    if not joined:
        missing["cgroup"] = "no cgroup of its own (the grader is not root, or no pids/memory controller)"
        return
    with open("/proc/self/cgroup") as f:
        mine = f.read()
    if all(path.split("/sys/fs/cgroup/", 1)[-1].split("/", 1)[-1] in mine for path in joined):
        walls["cgroup"] = "in force: " + ", ".join(config["cgroup_limits"]) + " (membership read back)"
    else:
        missing["cgroup"] = "joined, but /proc/self/cgroup does not list it"


def _mirror(pid: int) -> None:
    """The process that made the PID namespace, from the fork on: it runs no student code and sets
    nothing up, holds no descriptor (so the protocol pipes' EOF stays pid 1's alone), waits for pid 1
    and ends exactly as it did, so the parent tells the code's own exit from a limit's kill as before."""
    os.closerange(0, os.sysconf("SC_OPEN_MAX"))
    status = os.waitpid(pid, 0)[1]
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # pid 1 dumped no core either
        if number != signal.SIGKILL:
            signal.signal(number, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
        os.kill(os.getpid(), number)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def _namespaces(config: dict, walls: dict, missing: dict) -> int | None:
    """New mount, network, IPC and PID namespaces (inside a user namespace when not root), the hidden
    folders covered; each checked by its namespace id changing, the covering by a listing. Returns,
    in pid 1 of the new PID namespace, a pidfd of the process that forked it (which never returns
    from here); None where there is no PID namespace."""
    uid, gid = os.getuid(), os.getgid()
    before = _namespace_ids()
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | (0 if uid == 0 else CLONE_NEWUSER)
    try:
        try:
            _call("unshare", flags | CLONE_NEWPID)
        except OSError as exc:  # a host may refuse only this one (e.g. nesting too deep): keep the others
            missing["pid"] = f"unshare(CLONE_NEWPID) refused ({exc.strerror})"
            _call("unshare", flags)
        if uid != 0:
            # Its own uid inside, not 0: nothing in the child ever looks like root.
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
    except OSError as exc:
        cause = "no CAP_SYS_ADMIN, or a seccomp profile refuses unshare" if uid == 0 else "no user namespaces here"
        why = f"unshare refused ({exc.strerror}): {cause}"
        for wall in ("network", "ipc", "pid", "filesystem"):
            missing[wall] = why
        return None
    watch = None
    if "pid" not in missing:
        watch = os.pidfd_open(os.getpid())
        pid = os.fork()
        if pid:
            _mirror(pid)
    after = _namespace_ids()
    for wall, kind, text in (("network", "net", "in force: a network namespace of its own, no interface up"),
                             ("ipc", "ipc", "in force: an IPC namespace of its own (no SysV object is shared)")):
        if after[kind] != before[kind]:
            walls[wall] = text + " (namespace id checked)"
        else:
            missing[wall] = "unshare returned, but the namespace did not change"
    try:
        _hide(config["hide"] + [p for p in SHARED_WRITABLE if os.path.isdir(p)], config["expose"],
              config["workdir"], config["file_size_mb"])
    except OSError as exc:
        missing["filesystem"] = f"covering the hidden folders failed ({exc}; {NOT_THE_HOST})"
        return watch
    if watch is not None:
        _own_proc(walls)
    shown = [path for path in config["hide"] if os.path.isdir(path) and path not in config["expose"]
             and os.listdir(path) and not any(e.startswith(path + "/") for e in config["expose"])]
    if shown:
        missing["filesystem"] = f"{shown[0]} still shows its contents ({NOT_THE_HOST})"
    else:
        walls["filesystem"] = ("in force: course, submissions, results and home folders hidden (listed empty), "
                               f"/tmp, /var/tmp and /dev/shm covered, the work dir a {config['file_size_mb']} MB "
                               "tmpfs")
    return watch


def _own_proc(walls: dict) -> None:
    """A /proc of the PID namespace's own over the host's, so that no other process's files are there
    to read even where Landlock is missing; noted for the pid wall's line."""
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        seen = sorted(entry for entry in os.listdir("/proc") if entry.isdigit())
        walls["pid"] = f"/proc its own, listing pids {', '.join(seen)}"
    except OSError as exc:
        walls["pid"] = f"/proc still the host's (mounting its own failed: {exc.strerror})"


def _tie_to_parent(watch: int, missing: dict) -> None:
    """Pid 1 dies with the process that forked it: SIGKILL when it ends (set after the last change of
    uid, which would clear it), then the pidfd checked, in case it ended before that. The kernel then
    kills whatever else is in the namespace, so nothing outlives a killed submission."""
    try:
        _call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        poll = select.poll()
        poll.register(watch, select.POLLIN)
        if poll.poll(0):
            os._exit(1)
    except OSError as exc:
        missing["pid"] = f"could not tie pid 1 to its parent ({exc.strerror})"
    finally:
        os.close(watch)


def _probe_pid() -> str | None:
    """None when this process is pid 1 and its parent has no pid here: nothing outside can be named."""
    if os.getpid() != 1 or os.getppid() != 0:
        return f"raised, but getpid() is {os.getpid()} and getppid() {os.getppid()}"
    return None


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _capabilities() -> int:
    """The effective and permitted capability bits of this process, or'ed."""
    header, data = _CapHeader(CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _call("capget", ctypes.byref(header), data)
    return data[0].effective | data[0].permitted | data[1].effective | data[1].permitted


def _drop_privileges(config: dict, walls: dict, missing: dict) -> None:
    """Drop the bounding set and ambient capabilities while it may, then become a uid of its own (as
    root) and clear every capability; verified by the uids and capget."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
        for cap in range(last + 1):
            _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # refused without CAP_SETPCAP: nothing to drop then
        _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
        if os.getuid() == 0 or os.geteuid() == 0:
            os.setgroups([])
            os.setgid(config["uid"])
            os.setuid(config["uid"])
        _call("capset", ctypes.byref(_CapHeader(CAPABILITY_VERSION_3, 0)), (_CapData * 2)())
    except OSError as exc:
        missing["unprivileged"] = f"could not drop privileges ({exc.strerror})"
        return
    ids = os.getresuid() + os.getresgid()
    if 0 in ids or _capabilities():
        missing["unprivileged"] = f"still privileged (uids/gids {ids}, capabilities {_capabilities():#x})"
        return
    try:
        os.setuid(0)
        missing["unprivileged"] = "setuid(0) succeeded"
        return
    except OSError:
        pass
    own = "a uid of its own" if config["uid"] == os.getuid() else f"uid {os.getuid()}, the grader's"
    walls["unprivileged"] = f"in force: runs as {own}, with no capability (capget and setuid(0) probed)"


def _probe_seccomp(numbers: dict[str, int]) -> list[str]:
    """Each forbidden kind of call, tried so that without the filter it would fail harmlessly (a path
    that does not exist, a pid above pid_max, flags the kernel rejects): a refusal with EPERM can
    only be the filter's. Returns what was not refused."""
    tries = {
        "execve": ("execve", b"/nonexistent/backprop-ninja-probe", None, None),
        "fork": ("clone", SIGCHLD | CLONE_NEWNS | CLONE_FS, None, None, None, None),
        "sockets": ("socket", 1, 1, 0),  # AF_UNIX, SOCK_STREAM
        "SysV IPC": ("shmget", 0x7FFFFFF0, 1, 0),
        "POSIX message queues": ("mq_open", None, 0, 0, None),  # no name: EFAULT without the filter
        "ptrace": ("ptrace", PTRACE_PEEKDATA, NO_SUCH_PID, None, None),
        "signals to other processes": ("kill", NO_SUCH_PID, 0),
        "other processes' limits": ("prlimit64", NO_SUCH_PID, 0, None, None),
        "unshare": ("unshare", 0),
    }
    failed = []
    for name, (call, *args) in tries.items():
        result = _libc.syscall(ctypes.c_long(numbers[call]),
                               *(ctypes.c_long(a) if isinstance(a, int) else a for a in args))
        if result >= 0 or ctypes.get_errno() != errno.EPERM:
            failed.append(name)
        if call == "socket" and result >= 0:
            os.close(result)
    return failed


def _probe_landlock(config: dict) -> str | None:
    """None when a read outside the granted paths and a write in the work dir are both refused."""
    target = os.path.realpath(sys.executable)  # readable by the child, and granted by no rule
    try:
        os.close(os.open(target, os.O_RDONLY))
        return f"{target} could still be read"
    except PermissionError:
        pass
    except OSError as exc:
        return f"reading {target} failed with {errno.errorcode.get(exc.errno, exc.errno)}, not a refusal"
    probe = os.path.join(config["workdir"], ".write-probe")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(probe)
        return "a file could still be created in the work dir"
    except PermissionError:
        return None


def _probe_limits(applied: dict) -> str | None:
    """None when a private mapping just past the data limit is refused (nothing is touched)."""
    mmap = _libc.mmap
    mmap.restype = ctypes.c_void_p
    mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    size = resource.getrlimit(resource.RLIMIT_DATA)[0] + (1 << 20)
    address = mmap(None, size, 0x3, 0x02 | 0x20 | 0x4000, -1, 0)  # RW, PRIVATE|ANONYMOUS|NORESERVE
    if address not in (None, ctypes.c_void_p(-1).value):
        _libc.munmap(ctypes.c_void_p(address), ctypes.c_size_t(size))
        return f"a {size >> 20} MB private mapping past the data limit was allowed"
    return None


def wall(config: dict, ruleset: tuple[int, int] | None, ruleset_error: str | None = None) -> dict:
    """Wall the calling process in, irreversibly, probe each wall, and say what held.

    `ruleset` is the Landlock ruleset the fork server prepared (fd, ABI), or None with the reason in
    `ruleset_error`. The report has the old per-topic keys (user, network, filesystem, limits) for the
    results, plus `walls` (wall -> what a probe verified, or why it is missing), `missing` (the walls
    that did not hold) and, when a required one is missing, `refused`: the one line the grader stops
    with."""
    walls: dict[str, str] = {}
    missing: dict[str, str] = {}
    _cgroups(config, walls, missing)
    child_uid = config["uid"] if os.getuid() == 0 else os.getuid()
    other_tasks = _tasks_of_uid(child_uid)
    watch = _namespaces(config, walls, missing)
    if watch is not None and os.getuid() == child_uid:
        other_tasks += 1  # the process that forked pid 1 runs as the same uid
    _drop_privileges(config, walls, missing)
    if watch is not None:
        _tie_to_parent(watch, missing)
    try:
        applied = _limits(config, other_tasks)
    except (OSError, ValueError) as exc:
        applied = {}
        missing["limits"] = f"setrlimit refused ({exc})"
    _call("prctl", seccomp.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    os.chdir(config["workdir"])
    landlock_text = None
    if ruleset is None:
        missing["landlock"] = ruleset_error or "no ruleset"
    else:
        try:
            landlock_text = landlock.restrict(*ruleset)
        except landlock.Unavailable as exc:
            missing["landlock"] = str(exc)
        finally:
            os.close(ruleset[0])
    try:
        numbers = seccomp.syscalls()
        seccomp.install(os.getpid())
    except seccomp.Unavailable as exc:
        missing["seccomp"] = str(exc)
    # Every wall is up: now each is tried.
    if "seccomp" not in missing:
        failed = _probe_seccomp(numbers)
        if failed:
            missing["seccomp"] = f"raised, but {', '.join(failed)} still allowed"
        else:
            walls["seccomp"] = ("in force: execve, fork, sockets, SysV IPC, POSIX message queues, ptrace, "
                                "signals to other processes, "
                                "other processes' limits and unshare refused (probed)")
    if "pid" not in missing:
        problem = _probe_pid()
        if problem:
            missing["pid"] = problem
        else:
            walls["pid"] = ("in force: pid 1 of a PID namespace of its own, its parent outside it, so no process "
                            "but its own can be named (getpid and getppid probed); "
                            + walls.get("pid", "/proc still the host's"))
    if "landlock" not in missing:
        problem = _probe_landlock(config)
        if problem:
            missing["landlock"] = f"raised, but {problem}"
        else:
            walls["landlock"] = (f"in force: reading outside the granted paths and writing refused (probed); "
                                 f"{landlock_text}")
    if "limits" not in missing:
        problem = _probe_limits(applied)
        if problem:
            missing["limits"] = problem
        else:
            walls["limits"] = (f"in force: {applied['data_mb']} MB of data memory (a larger mapping probed), "
                               f"{applied['cpu_seconds']} s CPU, {applied['file_size_mb']} MB per file")
    if "unprivileged" in missing:
        user = "not isolated: " + missing["unprivileged"]
    elif config["uid"] == os.getuid():
        user = "an unprivileged uid of its own (no other process, no file belongs to it)"
    else:
        user = "same user, with no capability"
    report = {
        "user": user,
        "network": walls.get("network", "not isolated: " + missing.get("network", "")),
        "filesystem": walls.get("filesystem", "not isolated: " + missing.get("filesystem", "")),
        "pids_cgroup": next((text for text in config.get("cgroup_limits", []) if text.startswith("pids.max")),
                            "not available") if "cgroup" in walls else "not available: " + missing["cgroup"],
        "limits": applied,
        "walls": {name: walls.get(name) or f"missing: {missing[name]}" for name in WALLS},
        "missing": [name for name in WALLS if name in missing],
    }
    required = [name for name in config.get("require", ()) if name in missing]
    if required:
        report["refused"] = refusal(required[0], missing[required[0]])
    if 0 in os.getresuid():  # whatever the course allows
        report["refused"] = (f"student code never runs as root, and this child could not leave uid 0 "
                             f"({missing.get('unprivileged', 'still root')}). To fix it: {HOW['unprivileged']}")
    return report


def refusal(wall_name: str, why: str) -> str:
    """The one line a grader stops with when a required wall did not hold."""
    return (f"the sandbox's {wall_name} wall is required (course.yml sandbox.require) but missing here: {why}. "
            f"{remedy(wall_name, why)}; or grade with --allow-weaker-sandbox, and every result records "
            "what was missing")


def remedy(wall_name: str, why: str) -> str:
    """How to get a missing wall: a host setting, unless the cause was never the host's."""
    return "Nothing to enable" if NOT_THE_HOST in why else f"To enable it: {HOW[wall_name]}"
