"""The real command with the static check switched off, for the red team's floor mode:

    python tests/helpers/nostatic.py --wiretap FILE -- grade SUBMISSIONS... [OPTIONS]
    python tests/helpers/nostatic.py --wiretap FILE -- nbgrader autograde ASSIGNMENT [OPTIONS]

Every Python-level check is assumed to have a hole somewhere; the kernel walls must hold all the same.
With the static check on, a payload that reaches the walls needs an escape from it, and once the check
refuses that escape the payload never runs, so the walls go untested. Here every answer cell runs as
written (plain `import os`, `open`, `ctypes`), and what the child manages to do is met by the walls alone.

It lives among the tests, not in the package: a student cannot reach it, and the grader reads no
environment variable or setting that could switch the check off. `--wiretap FILE` appends, for each
submission, everything its sandboxed child sent back (errors and evidence, including what the cell
itself answered where the grader replaced it with the audit hook's report), one JSON line each: what
crossed the wall is seen there even where feedback masks or replaces it. A command that starts with
`nbgrader` runs nbgrader's own application in this process instead, whose autograde grades through the
same grader (grader.lms.nbgrader.GradeInSandbox), check switched off and wiretap on alike.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading


def _outcome(outcome) -> dict:
    found = {"status": outcome.status, "detail": outcome.detail}
    answered = getattr(outcome, "answered", None)
    if answered is not None:
        found["answered"] = _outcome(answered)
    return found


def _tap(path: str) -> None:
    from grader.pipeline import batch as grade

    lock = threading.Lock()
    attempt = grade.Grader._attempt

    def tapped(self, submission, progress):
        done = attempt(self, submission, progress)
        line = {"id": submission.id, "error": done.error,
                "outcomes": [[*key, _outcome(o)] for key, o in done.outcomes.items()]}
        with lock, open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, default=repr) + "\n")
        return done

    grade.Grader._attempt = tapped


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="nostatic", description=__doc__.split("\n\n")[0])
    parser.add_argument("--wiretap", help="append what each submission's child sent back to this file")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- backprop-ninja's arguments")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    from grader import cli
    from grader.sandbox import static_check

    def screen(cells, allow, budget=None):
        """Every cell runs; a printed fake score is still seen, as with the check on."""
        return static_check.Screened(dict(cells), {}, {cell: found for cell, source in cells.items()
                                                        if (found := static_check.forged_output(source))})

    static_check.screen = screen
    if args.wiretap:
        _tap(args.wiretap)
    if command[0] == "nbgrader":
        from nbgrader.apps.nbgraderapp import NbGraderApp

        NbGraderApp.launch_instance(argv=command[1:])
    else:
        cli.main(args=command, prog_name="backprop-ninja")


if __name__ == "__main__":
    main(sys.argv[1:])
