"""The host's IPC, inventoried from outside a sandbox, and a payload that tries every kind of it from inside.

Every object a child could make that another process could meet, or that could outlive it: POSIX message
queues (listed through an mqueue file system mounted for the inventory, since the host may mount none),
POSIX shared memory and named pipes (files in /dev/shm and /tmp), SysV objects (/proc/sysvipc, what `ipcs`
reads) and abstract unix sockets (/proc/net/unix, names starting with "@"). The inventory is of the
namespaces of the process that takes it: the host's, for a test.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

SHARED = ("/dev/shm", "/tmp", "/var/tmp")


def _sysv() -> set[str]:
    found = set()
    for kind, key in (("shm", "shmid"), ("msg", "msqid"), ("sem", "semid")):
        lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
        header = lines[0].split()
        for line in lines[1:]:
            row = dict(zip(header, line.split(), strict=False))
            found.add(f"sysv {kind} {row[key]} uid {row['cuid']}")
    return found


def _abstract() -> set[str]:
    lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    names = (fields[7] for line in lines if len(fields := line.split()) > 7)
    return {f"abstract {name} uid -1" for name in names if name.startswith("@")}


@contextlib.contextmanager
def _mqueue() -> Iterator[Path | None]:
    """The host's message queues as files: /dev/mqueue where it is mounted, else a mount made for the
    inventory (root only); None where neither is possible."""
    if Path("/dev/mqueue").is_dir() and os.path.ismount("/dev/mqueue"):
        yield Path("/dev/mqueue")
        return
    if os.getuid() != 0:
        yield None
        return
    point = Path(tempfile.mkdtemp(prefix="bpn-mqueue-"))
    try:
        subprocess.run(["mount", "-t", "mqueue", "mqueue", str(point)], check=True, capture_output=True)
        try:
            yield point
        finally:
            subprocess.run(["umount", str(point)], check=False, capture_output=True)
    finally:
        point.rmdir()


def inventory() -> set[str]:
    """One line per IPC object of the host's namespaces, e.g. "mqueue /name uid 0"."""
    found = _sysv() | _abstract()
    with _mqueue() as queues:
        if queues is not None:
            found |= {f"mqueue /{p.name} uid {p.stat().st_uid}" for p in queues.iterdir()}
    for place in SHARED:
        for name in os.listdir(place):
            with contextlib.suppress(OSError):
                found.add(f"file {place}/{name} uid {os.lstat(os.path.join(place, name)).st_uid}")
    return found


def made(before: set[str], after: set[str], tag: str, ours: Callable[[int], bool]) -> set[str]:
    """What is new since `before` and was made by the payload: named with `tag`, or a SysV object (which has
    no name when made with IPC_PRIVATE) owned by a uid `ours` accepts. Other processes on the machine, other
    graders' children among them, come and go."""
    return {line for line in after - before
            if tag in line or (line.startswith("sysv ") and ours(int(line.rsplit(" ", 1)[1])))}


# Defines try_ipc(tag) -> {kind: "made", or the errno that refused it}; what it makes is named with `tag`
# and left for the inventory to find (the test removes it: what it finds is a failure anyway).
PAYLOAD = r"""
import ctypes, os, socket
LEFT = []
def try_ipc(tag):
    res = {}
    libc = ctypes.CDLL(None, use_errno=True)
    def tried(kind, how):
        try:
            how()
            res[kind] = 'made'
        except OSError as e:
            res[kind] = e.errno
    def fail():
        raise OSError(ctypes.get_errno(), 'refused')
    def mq():
        try:
            rt = ctypes.CDLL('librt.so.1', use_errno=True)
        except OSError:
            rt = libc
        if rt.mq_open(('/' + tag).encode(), os.O_CREAT | os.O_RDWR, 0o666, None) < 0:
            fail()
    def sysv(call, *args):
        def how():
            if getattr(libc, call)(*args) < 0:
                fail()
        return how
    def abstract():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        LEFT.append(s)
        s.bind('\0' + tag)
        s.listen(1)
    tried('mq_open', mq)
    tried('shm_open', lambda: LEFT.append(os.open('/dev/shm/' + tag, os.O_CREAT | os.O_RDWR, 0o666)))
    tried('mkfifo', lambda: os.mkfifo('/tmp/' + tag + '.fifo'))
    tried('shmget', sysv('shmget', 0, 1 << 20, 0o1666))
    tried('msgget', sysv('msgget', 0, 0o1666))
    tried('semget', sysv('semget', 0, 1, 0o1666))
    tried('abstract socket', abstract)
    tried('socketpair', lambda: LEFT.extend(socket.socketpair()))
    tried('eventfd', lambda: LEFT.append(os.eventfd(0)))
    tried('memfd', lambda: LEFT.append(os.memfd_create(tag)))
    tried('pipe', lambda: LEFT.extend(os.pipe()))
    return res
"""
# Files, in places a private tmpfs covers (or Landlock refuses): the inventory judges them.
FILES = ("shm_open", "mkfifo")
# Kinds that stay inside the process that made them (gone with it, reachable by no other): allowed.
PRIVATE = ("pipe",)


def remove(objects: set[str]) -> None:
    """Undo what a failed test found, so that the next run starts clean."""
    for line in objects:
        kind, name, *_ = line.split()
        if kind == "sysv":
            flag = {"shm": "-m", "msg": "-q", "sem": "-s"}[name]
            subprocess.run(["ipcrm", flag, line.split()[2]], check=False, capture_output=True)
        elif kind == "file":
            with contextlib.suppress(OSError):
                os.unlink(name)
        elif kind == "mqueue":
            with _mqueue() as queues:
                if queues is not None:
                    with contextlib.suppress(OSError):
                        (queues / name.lstrip("/")).unlink()
