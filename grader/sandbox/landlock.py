"""The Landlock wall: what a sandboxed child may open, decided by the kernel for an unprivileged
process (Linux 5.13+, with Landlock among the active LSMs).

The fork server has imported everything a child runs before it forks, so a child needs to read very
little: the standard library, the top-level folders of the third-party packages the server loaded
(torch, numpy, ...), the grader's own module files and those of the exercise a child grades that the
server imported (one file at a time: a course shipped inside the grader package, or kept beside its
exercise module, stays unreadable), /dev/null and /dev/urandom. It may write
nothing at all (only /dev/null), bind or connect no TCP port (ABI 4+), and signal or reach an
abstract unix socket of no process outside its own Landlock domain (ABI 6+).

The server builds the ruleset after its warm-up and again after importing an exercise (`prepare`),
and every child only calls
restrict_self on it: a few microseconds per child instead of opening a hundred paths. It is
best-effort down to ABI 1: `restrict` says which parts held on this kernel.
"""
from __future__ import annotations

import ctypes
import errno
import os
import sys
import sysconfig

CREATE_RULESET, ADD_RULE, RESTRICT_SELF = 444, 445, 446  # the same on every architecture
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
# Every filesystem right each ABI knows: handled (so denied unless a rule grants it).
FS_RIGHTS = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2
READ = READ_FILE | READ_DIR
SITE_FOLDERS = ("site-packages", "dist-packages")
DEVICES = {"/dev/null": READ_FILE | WRITE_FILE, "/dev/urandom": READ_FILE}

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


class Unavailable(OSError):
    """Landlock cannot be raised here; the message says why and how to enable it."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi() -> int:
    """The kernel's Landlock ABI version; Unavailable when it has none in force."""
    version = _syscall(CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    if version >= 0:
        return version
    err = ctypes.get_errno()
    if err == errno.EOPNOTSUPP:
        raise Unavailable("Landlock is built into this kernel but not enabled: add landlock to the lsm= boot "
                          "parameter (or CONFIG_LSM)")
    if err == errno.ENOSYS:
        raise Unavailable("this kernel has no Landlock (Linux 5.13+ with CONFIG_SECURITY_LANDLOCK), or a "
                          "container's seccomp profile hides it")
    raise Unavailable(f"landlock_create_ruleset failed: {os.strerror(err)}")


def readable(own: tuple[str, ...] = ()) -> dict[str, int]:
    """path -> rights, for what a child of this (warmed-up) process must read. Modules beneath one of
    the `own` folders (an exercise's package outside the grader's, which may sit beside a course's
    solutions or a project's tests) are granted one file each, as the grader's own are."""
    stdlib = tuple({os.path.realpath(sysconfig.get_paths()[key]) for key in ("stdlib", "platstdlib")})
    # The standard library entry by entry, but for the site-packages folder a Python installed without
    # a virtual environment keeps inside it: packages there are granted one by one like any other.
    # The folder itself may be listed (so an import finds its modules), which lets names beneath it,
    # never contents, be listed.
    paths = {os.path.join(folder, entry): READ if os.path.isdir(os.path.join(folder, entry)) else READ_FILE
             for folder in stdlib for entry in os.listdir(folder) if entry not in SITE_FOLDERS}
    paths.update(dict.fromkeys(stdlib, READ_DIR))
    # The grader package (not this subpackage) and the exercises' packages.
    own = tuple(p + os.sep for p in (os.path.realpath(os.path.dirname(os.path.dirname(__file__))), *own))
    for module in list(sys.modules.values()):
        origin = getattr(module, "__file__", None)
        if not origin:
            continue
        origin = os.path.realpath(origin)
        if origin.startswith(tuple(p + os.sep for p in stdlib)):
            continue
        if origin.startswith(own):
            paths[origin] = READ_FILE  # these packages' imported modules, one file each
            continue
        top = module.__name__.partition(".")[0]
        root = sys.modules.get(top)
        top_file = os.path.realpath(getattr(root, "__file__", None) or origin)
        if os.path.basename(top_file) == "__init__.py":
            paths[os.path.dirname(top_file)] = READ
        else:
            paths[top_file] = READ_FILE  # a single-file module, or an extension module
    for device, rights in DEVICES.items():
        if os.path.exists(device):
            paths[device] = rights
    return paths


def _check(result: int, what: str) -> int:
    if result < 0:
        raise Unavailable(f"{what} failed: {os.strerror(ctypes.get_errno())}")
    return result


def prepare(own: tuple[str, ...] = ()) -> tuple[int, int]:
    """A ruleset for this process's children: (its fd, the ABI it was built for); `own` as `readable`'s."""
    version = abi()
    attr = _RulesetAttr(FS_RIGHTS[min(version, 5)],
                        NET_BIND_TCP | NET_CONNECT_TCP if version >= 4 else 0,
                        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0)
    size = 8 if version < 4 else 16 if version < 6 else 24
    fd = _check(_syscall(CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)),
                "landlock_create_ruleset")
    for path, rights in readable(own).items():
        try:
            parent = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue  # gone since it was imported: nothing to grant
        try:
            rule = _PathBeneath(rights, parent)
            _check(_syscall(ADD_RULE, fd, RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0)),
                   f"landlock_add_rule({path})")
        finally:
            os.close(parent)
    return fd, version


def restrict(ruleset: int, version: int) -> str:
    """Confine the calling process with a prepared ruleset, for good (NO_NEW_PRIVS must be set); returns
    the parts beyond files that this ABI raised too."""
    _check(_syscall(RESTRICT_SELF, ruleset, ctypes.c_uint32(0)), "landlock_restrict_self")
    extra = (["TCP bind and connect"] if version >= 4 else []) + (["signal and abstract-socket scopes"]
                                                                   if version >= 6 else [])
    return f"ABI {version}" + (f", with {' and '.join(extra)}" if extra else "")
