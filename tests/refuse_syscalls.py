"""Run a command on a host that refuses some system calls, as a container's seccomp profile or a
distribution's restriction does (Docker's default profile refuses unshare; Ubuntu 24.04 refuses user
namespaces; an old kernel or an LSM list without landlock answers ENOSYS or EOPNOTSUPP):

    python tests/refuse_syscalls.py landlock_create_ruleset:ENOSYS unshare:EPERM -- backprop-ninja grade ...

A seccomp filter is installed, then the command is executed; it and every process it starts inherit
the filter. The numbers come from the grader's own table (grader.seccomp.ARCHES)."""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys

from grader import seccomp

# Calls the grader's filter does not list, by architecture.
MORE = {
    "x86_64": {"landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446,
               "setuid": 105, "setgid": 106, "setgroups": 116},
    "aarch64": {"landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446,
                "setuid": 146, "setgid": 144, "setgroups": 159},
}


def install(refusals: dict[str, int]) -> None:
    arch, numbers = seccomp.ARCHES[platform.machine()]
    numbers = {**numbers, **MORE[platform.machine()]}
    insn = seccomp._insn
    code = [insn(seccomp.LD_W_ABS, seccomp.ARCH), insn(seccomp.JEQ_K, arch, 1, 0),
            insn(seccomp.RET_K, seccomp.SECCOMP_RET_ALLOW), insn(seccomp.LD_W_ABS, seccomp.NR)]
    for name, err in refusals.items():
        code += [insn(seccomp.JEQ_K, numbers[name], 0, 1), insn(seccomp.RET_K, seccomp.SECCOMP_RET_ERRNO | err)]
    code.append(insn(seccomp.RET_K, seccomp.SECCOMP_RET_ALLOW))
    program = b"".join(code)
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    assert prctl(seccomp.PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) == 0
    prog = seccomp._Filter(len(program) // 8, program)
    if prctl(seccomp.PR_SET_SECCOMP, seccomp.SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) != 0:
        sys.exit(f"refuse_syscalls: seccomp refused: {os.strerror(ctypes.get_errno())}")


def main() -> None:
    split = sys.argv.index("--")
    refusals = {}
    for item in sys.argv[1:split]:
        name, _, code = item.partition(":")
        refusals[name] = getattr(errno, code)
    install(refusals)
    os.execvp(sys.argv[split + 1], sys.argv[split + 1:])


if __name__ == "__main__":
    main()
