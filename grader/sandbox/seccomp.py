"""The seccomp wall: a classic-BPF filter, raised in every sandboxed child just before its first
message, that refuses the system calls a backward pass never needs and an escape always does.

Hand-written rather than built with libseccomp: it needs no library on the host (libseccomp is a
system package, absent from many containers) and fits on one screen. Each rule is tried by a real
sandboxed child in tests/test_walls.py, and the syscall numbers are checked there against
libseccomp's own tables where it is installed.

What it refuses, with EPERM so that the student's code sees an ordinary error:
- new programs and processes: execve, execveat, fork, vfork, and clone unless it makes a thread
  (clone3 answers ENOSYS, so that a libc falls back to clone, whose flags a filter can read);
- every way to reach or leave an object another process can meet, which a private namespace does not
  cover on a host that refuses namespaces (and some of which outlive the child): new sockets (the child
  talks only over the pipes it inherited; abstract unix sockets included), SysV IPC, POSIX message
  queues (a kernel object no Landlock rule sees: mq_open(O_CREAT) made a queue on the host), eventfd,
  memfd, and shared anonymous mappings (only useful to share with a process it cannot make); POSIX
  shared memory is a file in /dev/shm, which Landlock or a private tmpfs covers;
- reaching other processes: ptrace, process_vm_*, kcmp, pidfd_*, every signal call aimed
  anywhere but at its own process, and every call that changes another process of the same uid
  without a signal: prlimit64 and sched_set* allowed on itself only (a CPU-time limit of one second
  set on the grader kills it), setpriority and ioprio_set refused (their target may be every process
  of a uid), and fcntl's F_SETOWN and F_SETOWN_EX, which name a process for the kernel to signal
  when a file is ready (with F_SETSIG, a SIGKILL through SIGIO, which Landlock scopes only from ABI 6,
  Linux 6.12);
- changing its world: unshare, setns, mount and the new mount API, pivot_root, chroot, bpf, the
  keyring, userfaultfd, perf_event_open, memfd_create/memfd_secret, io_uring, personality changes,
  modules, kexec, reboot, swap, acct, quotactl.
A call made for another architecture than the filter's kills the process (its numbers mean other
calls), and so does x32's numbering on x86-64.
"""
from __future__ import annotations

import ctypes
import errno
import functools
import platform
import struct

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SECCOMP_RET_KILL_PROCESS, SECCOMP_RET_ERRNO, SECCOMP_RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
X32_SYSCALL_BIT = 0x40000000
CLONE_THREAD = 0x00010000
MAP_SHARED, MAP_ANONYMOUS = 0x01, 0x20
PERSONALITY_QUERY = 0xFFFFFFFF

# Classic BPF opcodes (linux/filter.h)
LD_W_ABS, JEQ_K, JGE_K, JSET_K, AND_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x54, 0x06
# struct seccomp_data: nr, arch, instruction_pointer, args[6] (each 64 bits; the low half first)
NR, ARCH = 0, 4


def _arg_low(index: int) -> int:
    return 16 + 8 * index


# Refused outright (absent names: the call does not exist on that architecture).
REFUSED = (
    "execve", "execveat", "fork", "vfork",
    "socket", "socketpair",
    "shmget", "shmat", "shmctl", "shmdt", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semctl",
    "semtimedop", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
    "eventfd", "eventfd2",
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp", "pidfd_open", "pidfd_getfd",
    "pidfd_send_signal", "setpriority", "ioprio_set",
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "open_by_handle_at",
    "bpf", "keyctl", "add_key", "request_key", "userfaultfd", "perf_event_open", "memfd_create", "memfd_secret",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff",
    "acct", "quotactl", "uselib",
)
# Signals: allowed only when the target (the first argument, a pid or tgid) is the child itself.
SIGNALLING = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")
# Calls on the process its first argument names (0: the caller): allowed only on the child itself.
ON_ONE_PROCESS = ("prlimit64", "sched_setaffinity", "sched_setparam", "sched_setscheduler", "sched_setattr")
# fcntl commands (its second argument) that name a process for the kernel to signal: F_SETOWN, F_SETOWN_EX
# (the ioctls that do the same, FIOSETOWN and SIOCSPGRP, act on sockets only, which the child cannot have).
SIGNAL_OWNER = (8, 15)

# (AUDIT_ARCH value, syscall numbers), generated from each kernel's syscall table.
ARCHES = {
    "x86_64": (0xC000003E, {
        "execve": 59, "execveat": 322, "fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "socket": 41,
        "socketpair": 53, "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "msgget": 68, "msgsnd": 69,
        "msgrcv": 70, "msgctl": 71, "semget": 64, "semop": 65, "semctl": 66, "semtimedop": 220, "ptrace": 101,
        "process_vm_readv": 310, "process_vm_writev": 311, "process_madvise": 440, "kcmp": 312, "pidfd_open": 434,
        "pidfd_getfd": 438, "pidfd_send_signal": 424, "kill": 62, "tkill": 200, "tgkill": 234,
        "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "unshare": 272, "setns": 308, "mount": 165,
        "umount2": 166, "pivot_root": 155, "chroot": 161, "open_tree": 428, "move_mount": 429, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "open_by_handle_at": 304, "bpf": 321,
        "keyctl": 250, "add_key": 248, "request_key": 249, "userfaultfd": 323, "perf_event_open": 298,
        "memfd_create": 319, "memfd_secret": 447, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "personality": 135, "mmap": 9, "init_module": 175, "finit_module": 313,
        "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320, "reboot": 169, "swapon": 167,
        "swapoff": 168, "acct": 163, "quotactl": 179, "uselib": 134, "mq_open": 240, "mq_unlink": 241,
        "mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245, "eventfd": 284,
        "eventfd2": 290, "setpriority": 141, "ioprio_set": 251,
        "prlimit64": 302, "sched_setaffinity": 203, "sched_setparam": 142, "sched_setscheduler": 144,
        "sched_setattr": 314, "fcntl": 72,
    }),
    "aarch64": (0xC00000B7, {
        "execve": 221, "execveat": 281, "clone": 220, "clone3": 435, "socket": 198, "socketpair": 199,
        "shmget": 194, "shmat": 196, "shmctl": 195, "shmdt": 197, "msgget": 186, "msgsnd": 189, "msgrcv": 188,
        "msgctl": 187, "semget": 190, "semop": 193, "semctl": 191, "semtimedop": 192, "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271, "process_madvise": 440, "kcmp": 272, "pidfd_open": 434,
        "pidfd_getfd": 438, "pidfd_send_signal": 424, "kill": 129, "tkill": 130, "tgkill": 131,
        "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "unshare": 97, "setns": 268, "mount": 40, "umount2": 39,
        "pivot_root": 41, "chroot": 51, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "mount_setattr": 442, "open_by_handle_at": 265, "bpf": 280, "keyctl": 219,
        "add_key": 217, "request_key": 218, "userfaultfd": 282, "perf_event_open": 241, "memfd_create": 279,
        "memfd_secret": 447, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "personality": 92, "mmap": 222, "init_module": 105, "finit_module": 273, "delete_module": 106,
        "kexec_load": 104, "kexec_file_load": 294, "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89,
        "quotactl": 60, "mq_open": 180, "mq_unlink": 181, "mq_timedsend": 182, "mq_timedreceive": 183,
        "mq_notify": 184, "mq_getsetattr": 185, "eventfd2": 19,
        "setpriority": 140, "ioprio_set": 30, "prlimit64": 261, "sched_setaffinity": 122,
        "sched_setparam": 118, "sched_setscheduler": 119, "sched_setattr": 274, "fcntl": 25,
    }),
}


class Unavailable(OSError):
    """The filter cannot be raised here; the message says why."""


def syscalls() -> dict[str, int]:
    """This machine's syscall numbers (for the filter, and for the child's probes of it)."""
    machine = platform.machine()
    if machine not in ARCHES:
        raise Unavailable(f"no syscall table for the {machine} architecture (x86_64 and aarch64 are known)")
    return ARCHES[machine][1]


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(own_pid: int) -> bytes:
    """The filter for this architecture, for a process whose pid is `own_pid`."""
    audit_arch, numbers = ARCHES[platform.machine()][0], syscalls()
    allow, refuse = _insn(RET_K, SECCOMP_RET_ALLOW), _insn(RET_K, SECCOMP_RET_ERRNO | errno.EPERM)

    def rule(name: str, body: list[bytes]) -> list[bytes]:
        """If the call is `name`, run `body` (which returns); else go on to the next rule."""
        return [_insn(JEQ_K, numbers[name], 0, len(body)), *body]

    def on_arg(index: int, test: int, value: int, then: bytes, otherwise: bytes) -> list[bytes]:
        return [_insn(LD_W_ABS, _arg_low(index)), _insn(test, value, 0, 1), then, otherwise]

    rules: list[bytes] = []
    for name in REFUSED:
        if name in numbers:
            rules += rule(name, [refuse])
    rules += rule("clone3", [_insn(RET_K, SECCOMP_RET_ERRNO | errno.ENOSYS)])
    rules += rule("clone", on_arg(0, JSET_K, CLONE_THREAD, allow, refuse))
    for name in SIGNALLING:
        rules += rule(name, on_arg(0, JEQ_K, own_pid, allow, refuse))
    for name in ON_ONE_PROCESS:
        rules += rule(name, [_insn(LD_W_ABS, _arg_low(0)), _insn(JEQ_K, 0, 1, 0), _insn(JEQ_K, own_pid, 0, 1),
                             allow, refuse])
    rules += rule("fcntl", [_insn(LD_W_ABS, _arg_low(1)), *(_insn(JEQ_K, command, len(SIGNAL_OWNER) - i, 0)
                                                            for i, command in enumerate(SIGNAL_OWNER)), allow, refuse])
    rules += rule("personality", on_arg(0, JEQ_K, PERSONALITY_QUERY, allow, refuse))
    shared_anonymous = MAP_SHARED | MAP_ANONYMOUS
    rules += rule("mmap", [_insn(LD_W_ABS, _arg_low(3)), _insn(AND_K, shared_anonymous),
                           _insn(JEQ_K, shared_anonymous, 0, 1), refuse, allow])
    head = [
        _insn(LD_W_ABS, ARCH), _insn(JEQ_K, audit_arch, 1, 0), _insn(RET_K, SECCOMP_RET_KILL_PROCESS),
        _insn(LD_W_ABS, NR),
    ]
    if audit_arch == ARCHES["x86_64"][0]:
        head += [_insn(JGE_K, X32_SYSCALL_BIT, 0, 1), _insn(RET_K, SECCOMP_RET_KILL_PROCESS)]
    # Each rule reloads an argument into the accumulator only on its own branch, which returns: the
    # syscall number is still there for the next rule.
    return b"".join(head + rules + [allow])


_prctl = ctypes.CDLL(None, use_errno=True).prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]


class _Filter(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


PID_PLACEHOLDER = 0x7FFFFFFE  # above any pid_max, and no other constant of the filter


@functools.lru_cache(maxsize=1)
def template() -> tuple[bytes, tuple[int, ...]]:
    """The filter with a placeholder for the child's pid, and where the placeholder sits: built once
    in the fork server (its warm-up calls this), so that a child only writes its pid in."""
    code = program(PID_PLACEHOLDER)
    places = tuple(offset for offset in range(0, len(code), 8)
                   if struct.unpack_from("=HBBI", code, offset)[::3] == (JEQ_K, PID_PLACEHOLDER))
    return code, places


def install(own_pid: int) -> None:
    """Raise the filter on the calling thread (the child has no other), for good."""
    code, places = template()
    code = bytearray(code)
    for offset in places:
        struct.pack_into("=I", code, offset + 4, own_pid)
    load(bytes(code))


def load(code: bytes) -> None:
    """Set NO_NEW_PRIVS (which an unprivileged process needs) and raise a filter program."""
    if _prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        raise Unavailable(f"prctl(NO_NEW_PRIVS) refused: {errno.errorcode.get(ctypes.get_errno(), '?')}")
    prog = _Filter(len(code) // 8, code)
    if _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        why = {errno.EINVAL: "the kernel was built without seccomp filters (CONFIG_SECCOMP_FILTER)",
               errno.EACCES: "the process may not raise filters"}.get(err, errno.errorcode.get(err, str(err)))
        raise Unavailable(f"seccomp refused: {why}")
