"""Run a command on a host that refuses some system calls, as a container's seccomp profile or a
distribution's restriction does (Docker's default profile refuses unshare; Ubuntu 24.04 refuses user
namespaces; an old kernel or an LSM list without landlock answers ENOSYS or EOPNOTSUPP):

    python tests/refuse_syscalls.py landlock_create_ruleset:ENOSYS unshare:EPERM -- backprop-ninja grade ...

A seccomp filter is installed, then the command is executed; it and every process it starts inherit
the filter. The numbers come from the grader's own table (grader.sandbox.seccomp.ARCHES)."""
from __future__ import annotations

import errno
import os
import platform
import sys

from grader.sandbox import seccomp

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
    seccomp.load(b"".join(code))


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
