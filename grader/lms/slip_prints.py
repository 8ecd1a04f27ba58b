"""The rule table's slips fingerprinted on the self-check's own batches, written beside a course's
notebook, so that a student's self-check without the rule table (backprop-ninja-student) names a slip
in the grader's words; grader.judge.prints says what a fingerprint holds and why it gives nothing away.
"""
from __future__ import annotations

import json
from pathlib import Path

from grader.exercise import ATOMIC, FUSED
from grader.files import atomic_write
from grader.judge import neighbourhood, prints
from grader.judge.exam import CHAIN, checks
from grader.student.check import own_cases


def build(spec: str) -> dict:
    """Per self-check case, grade id and check: the right answer's fingerprint and each slip's, in the
    order the grader tries them (a fused answer's: each slip of a step inside its block). `spec` loads
    the exercise here (a course's own file by its path)."""
    cases = {}
    for case in own_cases(spec):
        per_answer: dict = {}
        for answer in case.exercise.answers:
            if answer.kind == ATOMIC:
                made = {check: neighbourhood.slip_values(case, answer, check) for check in checks(answer)}
            elif answer.kind == FUSED:  # a slip at a step inside its block, carried to its tensor
                made = {CHAIN: neighbourhood.carried_slips(case, answer)}
            else:
                continue
            for check, values in made.items():
                if values:
                    per_answer.setdefault(answer.grade_id, {})[check] = {
                        "expected": prints.fingerprint(case.expected(answer, check)),
                        "slips": [[key, sentence, prints.fingerprint(t)] for key, sentence, t in values]}
        cases[case.config.name] = per_answer
    return cases


def write(folder: Path, spec: str, notebook_spec: str) -> Path:
    """The fingerprints file in `folder` (the notebook's), for the notebook that loads `notebook_spec`."""
    path = Path(folder) / prints.FILE
    text = json.dumps({"format": prints.FORMAT, "spec": notebook_spec, "cases": build(spec)},
                      separators=(",", ":"))
    atomic_write(path, text, mode=0o644)
    return path
