"""Run a command on a host that refuses user namespaces, as Ubuntu 24.04's AppArmor restriction, Docker's
default seccomp profile and many JupyterHub containers do:

    python -m tests.helpers.nouserns [--all-namespaces] -- COMMAND [ARGS...]

installs a seccomp filter, then execs COMMAND, which inherits it with every process it starts.
unshare(2) and clone(2) asking for a new user namespace fail with EPERM; with --all-namespaces any new
namespace does (Docker's profile for a process without CAP_SYS_ADMIN, root included). clone3(2) passes
its flags in memory a filter cannot read, so it fails with ENOSYS, and the C library falls back to
clone(2), which the filter can judge. Everything else is allowed.

A classic BPF program through prctl(2), written here with ctypes: the test needs no library, and the
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

# machine -> (AUDIT_ARCH, unshare, clone, clone3)
SYSCALLS = {
    "x86_64": (0xC000003E, 272, 56, 435),
    "aarch64": (0xC00000B7, 97, 220, 435),
}


def program(flags: int, machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions: a foreign architecture's calls (an x32 or 32-bit
    process could ask for the same thing by another number) are refused outright."""
    arch, unshare, clone, clone3 = SYSCALLS[machine or platform.machine()]
    deny = SECCOMP_RET_ERRNO | errno.EPERM
    return [
        (LD_ABS, 0, 0, ARCH),
        (JEQ, 1, 0, arch),
        (RET, 0, 0, deny),
        (LD_ABS, 0, 0, NR),
        (JGE, 7, 0, X32_BIT),                    # x32 numbers on x86_64: refused
        (JEQ, 7, 0, clone3),
        (JEQ, 1, 0, unshare),
        (JEQ, 0, 3, clone),
        (LD_ABS, 0, 0, ARG0_LOW),
        (JSET, 0, 1, flags),
        (RET, 0, 0, deny),
        (RET, 0, 0, SECCOMP_RET_ALLOW),
        (RET, 0, 0, deny),                        # x32
        (RET, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS),  # clone3: the C library falls back to clone
    ]


def install(flags: int = CLONE_NEWUSER) -> None:
    """Refuse new namespaces named by `flags` to this process and everything it starts, for good."""
    code = program(flags)
    buffer = b"".join(struct.pack("HBBI", *instruction) for instruction in code)
    filters = ctypes.create_string_buffer(buffer, len(buffer))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(code), ctypes.addressof(filters))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    for args in ((PR_SET_NO_NEW_PRIVS, 1, None, 0, 0), (PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0)):
        if libc.prctl(*args) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl: {os.strerror(err)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.helpers.nouserns", description=__doc__.split("\n\n")[0])
    parser.add_argument("--all-namespaces", action="store_true",
                        help="refuse every new namespace, not only user namespaces (Docker's default profile)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    try:
        install(CLONE_NEW_ANY if args.all_namespaces else CLONE_NEWUSER)
        os.execvp(command[0], command)
    except (OSError, KeyError) as exc:
        sys.exit(f"nouserns: {exc}")


if __name__ == "__main__":
    main()
