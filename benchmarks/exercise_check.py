"""How long `backprop-ninja exercise check` takes, as an instructor runs it after an edit: for each exercise
given (a file's path or a built-in name), the command's wall and CPU seconds (its own and its children's:
the course init, the grading routes' processes, the self-check's kernels), with and without --quick, and
the table it printed (answers, slips, routes, the self-check's agreement). Usage:
python benchmarks/exercise_check.py SPEC... [--quick-only]
"""
from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time


def measure(spec: str, quick: bool) -> tuple[float, float, int, list[str]]:
    """(wall s, CPU s, exit status, the table's lines) of one exercise check."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", "from grader.cli import main; main()", "exercise", "check", spec,
                           *(["--quick"] if quick else [])], capture_output=True, text=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    lines = done.stdout.splitlines() if done.returncode == 0 else done.stderr.splitlines()[-5:]
    rows = ("answers", "slips", "routes", "self-check", "time")
    table = [line for line in lines if line.split(" ", 1)[0] in rows] or lines
    return wall, cpu, done.returncode, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="+")
    parser.add_argument("--quick-only", action="store_true", help="measure only `exercise check --quick`")
    args = parser.parse_args()
    for spec in args.specs:
        for quick in (True,) if args.quick_only else (True, False):
            wall, cpu, status, table = measure(spec, quick)
            print(f"{spec}{' --quick' if quick else ''}: exit {status}, {wall:.0f} s wall, {cpu:.0f} s CPU")
            for line in table:
                print(f"    {line}")


if __name__ == "__main__":
    main()
