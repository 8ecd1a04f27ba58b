"""Run a command on a host that refuses some system calls, as a container's seccomp profile or a
distribution's restriction does (Docker's default profile refuses unshare and any new namespace to a
process without CAP_SYS_ADMIN, root included; Ubuntu 24.04's AppArmor restriction and many JupyterHub
containers refuse user namespaces; an old kernel or an LSM list without landlock answers ENOSYS):

    python tests/helpers/refuse.py [CALL:ERRNO ...] [--user-namespaces | --all-namespaces] -- COMMAND [ARGS...]

e.g. `landlock_create_ruleset:ENOSYS setuid:EPERM`. A seccomp filter is installed, then COMMAND is
executed; it and every process it starts inherit the filter. CALL:ERRNO refuses every call of CALL with
ERRNO. --user-namespaces refuses unshare(2) and clone(2) with EPERM only when they ask for a new user
namespace, and lets every other use through; --all-namespaces refuses any new namespace. clone3(2)
passes its flags in memory a filter cannot read, so under either option it fails with ENOSYS, and the C
library falls back to clone(2), which the filter can judge. Everything else is allowed, but for the
calls of a foreign architecture (an x32 or 32-bit process could ask for the same thing by another
number), which are refused outright.

A classic BPF program through prctl(2), written here with ctypes and apart from the grader's own filter
(grader/sandbox/seccomp.py), so that a fault there cannot hide in the host the tests simulate; the
program is small enough to read (`program()`).
"""
from __future__ import annotations

import argparse
import ctypes
import errno
import os
import platform
import struct
import sys

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
# BPF opcodes: BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_JMP|BPF_JSET|BPF_K, BPF_JMP|BPF_JGE|BPF_K, BPF_RET|BPF_K
LD_ABS, JEQ, JSET, JGE, RET = 0x20, 0x15, 0x45, 0x35, 0x06
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6] (flags: args[0], low word)
NR, ARCH, ARG0_LOW = 0, 4, 16

CLONE_NEWUSER = 0x10000000
CLONE_NEW_ANY = 0x00000080 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
X32_BIT = 0x40000000

# machine -> (AUDIT_ARCH, {call: number})
SYSCALLS = {
    "x86_64": (0xC000003E, {"unshare": 272, "clone": 56, "clone3": 435, "setuid": 105, "setgid": 106,
                            "setgroups": 116, "landlock_create_ruleset": 444, "landlock_add_rule": 445,
                            "landlock_restrict_self": 446}),
    "aarch64": (0xC00000B7, {"unshare": 97, "clone": 220, "clone3": 435, "setuid": 146, "setgid": 144,
                             "setgroups": 159, "landlock_create_ruleset": 444, "landlock_add_rule": 445,
                             "landlock_restrict_self": 446}),
}


def program(refusals: dict[str, int], namespaces: int = 0,
            machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions: each call of `refusals` answers its errno; with
    `namespaces`, unshare and clone asking for any of those flags answer EPERM, clone3 ENOSYS."""
    arch, numbers = SYSCALLS[machine or platform.machine()]
    deny = SECCOMP_RET_ERRNO | errno.EPERM
    code = [(LD_ABS, 0, 0, ARCH), (JEQ, 1, 0, arch), (RET, 0, 0, deny), (LD_ABS, 0, 0, NR),
            (JGE, 0, 1, X32_BIT), (RET, 0, 0, deny)]  # x32 numbers on x86_64: refused
    for name, err in refusals.items():
        code += [(JEQ, 0, 1, numbers[name]), (RET, 0, 0, SECCOMP_RET_ERRNO | err)]
    if namespaces:
        code += [
            (JEQ, 0, 1, numbers["clone3"]),
            (RET, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS),  # the C library falls back to clone
            (JEQ, 1, 0, numbers["unshare"]),
            (JEQ, 0, 3, numbers["clone"]),
            (LD_ABS, 0, 0, ARG0_LOW),
            (JSET, 0, 1, namespaces),
            (RET, 0, 0, deny),
        ]
    return [*code, (RET, 0, 0, SECCOMP_RET_ALLOW)]


def install(refusals: dict[str, int], namespaces: int = 0) -> None:
    """Refuse those calls to this process and everything it starts, for good."""
    code = program(refusals, namespaces)
    buffer = b"".join(struct.pack("HBBI", *instruction) for instruction in code)
    filters = ctypes.create_string_buffer(buffer, len(buffer))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(code), ctypes.addressof(filters))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    for args in ((PR_SET_NO_NEW_PRIVS, 1, None, 0, 0),
                 (PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0)):
        if libc.prctl(*args) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl: {os.strerror(err)}")


def _refusal(text: str) -> tuple[str, int]:
    name, _, code = text.partition(":")
    if name not in SYSCALLS.get(platform.machine(), (0, {}))[1] or not hasattr(errno, code):
        raise argparse.ArgumentTypeError(f"{text!r} is not CALL:ERRNO of a call this helper knows (unshare:EPERM)")
    return name, getattr(errno, code)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="refuse", description=__doc__.split("\n\n")[0])
    parser.add_argument("refusals", nargs="*", type=_refusal, metavar="CALL:ERRNO")
    namespaces = parser.add_mutually_exclusive_group()
    namespaces.add_argument("--user-namespaces", dest="namespaces", action="store_const", const=CLONE_NEWUSER,
                            default=0, help="refuse a new user namespace (Ubuntu 24.04's restriction)")
    namespaces.add_argument("--all-namespaces", dest="namespaces", action="store_const", const=CLONE_NEW_ANY,
                            help="refuse every new namespace (Docker's default profile)")
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    args, command = parser.parse_args(argv[:split]), argv[split + 1:]
    if not command:
        parser.error("no command given")
    try:
        install(dict(args.refusals), args.namespaces)
        os.execvp(command[0], command)
    except (OSError, KeyError) as exc:
        sys.exit(f"refuse: {exc}")


if __name__ == "__main__":
    main()
