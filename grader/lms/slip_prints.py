"""The rule table's slips fingerprinted on the self-check's own batches, written beside a course's
notebook, so that a student's self-check without the rule table (backprop-ninja-student) names a slip
in the grader's words; grader.judge.prints says what a fingerprint holds and why it gives nothing away.
"""
from __future__ import annotations

import json
from pathlib import Path

from grader import derive
from grader.exercise import ATOMIC, FUNCTION, FUSED
from grader.judge import neighbourhood, prints
from grader.judge.exam import CHAIN, checks
from grader.outputs.files import atomic_write
from grader.student.selfcheck import own_cases


def build(spec: str) -> tuple[dict, dict]:
    """Per grade id and check, each slip's key, in the order the grader tries them (a fused answer's or a
    function's: each slip of a step inside its block); per self-check case, grade id and check, the right
    answer's fingerprint and each slip's, with its sentence sealed by its values. `spec` loads the exercise
    here (a course's own file by its path)."""
    neighbourhood.use_rule_table(derive)  # what the fingerprints hold are the rule table's slips
    named: dict = {}
    cases: dict = {}
    for case in own_cases(spec):
        per_answer: dict = {}
        for answer in case.exercise.answers:
            if answer.kind == ATOMIC:
                made = {check: neighbourhood.slip_values(case, answer, check) for check in checks(answer)}
            elif answer.kind in (FUSED, FUNCTION):  # a slip at a step inside its block, carried to its tensor
                own = neighbourhood.slip_values(case, answer, CHAIN) if answer.kind == FUSED else None
                made = {CHAIN: [*(own or []), *neighbourhood.carried_slips(case, answer)]}
            else:
                continue
            for check, values in made.items():
                if not values:
                    continue
                keys = named.setdefault(answer.grade_id, {}).setdefault(check, {})
                keys.update(dict.fromkeys(key for key, _, _ in values))
                reads = neighbourhood.slip_reads(case, answer) if answer.kind == ATOMIC else {}
                per_answer.setdefault(answer.grade_id, {})[check] = {
                    "expected": prints.fingerprint(case.expected(answer, check)),
                    "prints": {key: {**prints.fingerprint(t), "s": prints.seal(sentence, t),
                                     **_sealed_reads(reads.get(key), t)} for key, sentence, t in values}}
        cases[case.config.name] = per_answer
    slips = {g: {check: list(keys) for check, keys in per.items()} for g, per in named.items()}
    return slips, cases


def _sealed_reads(reads: tuple[str, ...] | None, tensor) -> dict:
    """An atomic answer's slip's names read, sealed as its sentence is: the self-check, as the grader, tells a
    slip whose code reads a name the student's never does as the account it is not (a branch forgotten whole
    can equal a slip inside that branch)."""
    return {"r": prints.seal(",".join(reads), tensor)} if reads else {}


def write(folder: Path, spec: str, notebook_spec: str) -> Path:
    """The fingerprints file in `folder` (the notebook's), for the notebook that loads `notebook_spec`."""
    path = Path(folder) / prints.FILE
    slips, cases = build(spec)
    text = json.dumps({"format": prints.FORMAT, "spec": notebook_spec, "slips": slips, "cases": cases},
                      separators=(",", ":"))
    atomic_write(path, text, mode=0o644)
    return path
