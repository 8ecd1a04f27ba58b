"""The self-check without the rule table (a graded course's students have backprop-ninja-student, which
leaves grader.derive out) names every rule-table slip in the grader's words, from the fingerprints
`course init` writes beside the notebook; and with no fingerprints, or ones that do not fit, it claims
no slip at all.

The student's side runs in a process where importing grader.derive fails, as it does in that wheel; the
answers it judges are each slip's tensors, made here with the rule table.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grader.exercise import ATOMIC, FUNCTION, FUSED, load
from grader.judge import prints
from grader.judge.configs import generate
from grader.judge.diagnose import name
from grader.judge.exam import CHAIN, checks, prepare
from grader.judge.neighbourhood import carried_slips, slip_values
from grader.lms import slip_prints
from grader.student.selfcheck import own_cases
from helpers.paths import ROOT

RTOL, ATOL = 1e-5, 1e-8
GALLERY = ROOT / "grader" / "exercises" / "gallery"
# The lecture, a variant whose steps the lecture lacks, and an exercise of its own (a recurrent one).
SPECS = ["makemore-mlp", "makemore-mlp/relu-layernorm", f"{GALLERY / 'rnn.py'}:EXERCISE"]

STUDENT = """
import json, sys, torch
sys.modules["grader.derive"] = None  # as in backprop-ninja-student: importing it fails
from grader.judge.configs import generate
from grader.judge.diagnose import name
from grader.judge.exam import prepare
from grader.student.selfcheck import choose_rule_table, own_cases
choose_rule_table()  # as a self-check there chooses: no rule table, the fingerprints
spec, answers = sys.argv[1], torch.load(sys.argv[2])
exercise_cases = [*own_cases(spec), prepare(generate(spec, "the notebook's own batch", 1)[0])]
said = {}
for (grade_id, check, slip), tensors in answers.items():
    answer = exercise_cases[0].exercise.by_grade_id[grade_id]
    said[f"{grade_id} {check} {slip}"] = name(list(zip(exercise_cases, tensors)), answer, check, 1e-5, 1e-8)
print(json.dumps(said))
"""


def _notebook_spec(spec: str) -> str:
    return f"{Path(spec.rpartition(':')[0]).name}:EXERCISE" if spec.endswith(":EXERCISE") else spec


SENTENCES: set[str] = set()  # every slip's own sentence `_slips` has seen, as the grader says it


def _slips(spec: str):
    """Each slip's answer (grade id, check, key; a fused answer's or a function's, each slip of a step
    inside its block)
    on the self-check's own cases and on one more batch the
    fingerprints were not made on (the notebook's own), with what the grader says of it there; a slip
    the right answer equals on every case (a branch that is zero on the true chain) is no wrong answer."""
    cases = [*own_cases(spec), prepare(generate(spec, "the notebook's own batch", 1)[0])]
    exercise = cases[0].exercise
    answers, said = {}, {}
    functions = [a for a in exercise.answers if a.kind == FUNCTION][:2]  # each costs a search of its block
    for answer in exercise.answers:
        if answer.kind not in (ATOMIC, FUSED) and answer not in functions:
            continue
        for check in checks(answer) if answer.kind == ATOMIC else (CHAIN,):
            made = [slip_values(case, answer, check) if answer.kind == ATOMIC else
                    [*((slip_values(case, answer, CHAIN) if answer.kind == FUSED else None) or ()),
                     *carried_slips(case, answer)] for case in cases]  # as slip_prints.build makes them
            SENTENCES.update(f"your {answer.variable} {sentence}" for key, sentence, _ in made[0])
            per_case = [{key: t for key, _, t in per} for per in made]
            right = [case.expected(answer, check) for case in cases]
            for key in per_case[0]:
                if all(key in made for made in per_case) and not all(
                        torch.allclose(made[key], want, rtol=RTOL, atol=ATOL) for made, want in zip(per_case, right)):
                    tensors = [made[key] for made in per_case]
                    answers[(answer.grade_id, check, key)] = tensors
                    said[f"{answer.grade_id} {check} {key}"] = name(list(zip(cases, tensors)), answer, check,
                                                                    RTOL, ATOL)
    return answers, said


def _student(spec: str, answers: dict, folder: Path) -> dict:
    folder.mkdir(exist_ok=True)
    torch.save(answers, folder / "answers.pt")
    if spec.endswith(":EXERCISE"):  # a course's own exercise is released beside the notebook
        (folder / Path(spec.rpartition(":")[0]).name).write_bytes(Path(spec.rpartition(":")[0]).read_bytes())
    done = subprocess.run([sys.executable, "-c", STUDENT, _notebook_spec(spec), str(folder / "answers.pt")],
                          cwd=folder, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECS, ids=["lecture", "variant", "rnn"])
def test_the_self_check_without_the_rule_table_names_every_slip_as_the_grader_does(spec, tmp_path):
    answers, grader_said = _slips(spec)
    folder = tmp_path / "released"
    folder.mkdir()
    slip_prints.write(folder, spec, _notebook_spec(spec))
    student_said = _student(spec, answers, folder)
    differ = {k: (grader_said[k], student_said[k]) for k in grader_said if grader_said[k] != student_said[k]}
    assert not differ
    assert sum(1 for s in grader_said.values() if s) > 0.9 * len(grader_said)


@pytest.mark.slow
def test_without_fingerprints_or_with_stale_ones_the_self_check_claims_no_slip(tmp_path):
    """No file, or one made for another batch (a torch that draws other numbers): the slips are unknown,
    so the self-check says what the search alone finds, never a slip's sentence."""
    spec = SPECS[2]
    answers, grader_said = _slips(spec)
    slip_sentences = {s for s in grader_said.values() if s in SENTENCES}
    alone = _student(spec, answers, tmp_path / "none")
    stale = tmp_path / "stale"
    stale.mkdir()
    slip_prints.write(stale, spec, _notebook_spec(spec))
    data = json.loads((stale / prints.FILE).read_text())
    for per_answer in data["cases"].values():
        for per_check in per_answer.values():
            for made in per_check.values():
                made["expected"]["p"] = [p + 1.0 for p in made["expected"]["p"]]  # another torch's batches
    (stale / prints.FILE).write_text(json.dumps(data))
    for said in (alone, _student(spec, answers, stale)):
        slip_only = {k: v for k, v in said.items() if v in slip_sentences and v != grader_said[k]}
        assert not slip_only
        assert said == alone


def test_a_fingerprint_matches_whatever_allclose_accepts_and_not_a_different_tensor():
    g = torch.Generator().manual_seed(1)
    tensor = torch.randn(32, 64, generator=g, dtype=torch.float64)
    print_ = prints.fingerprint(tensor)
    noise = (torch.rand(tensor.shape, generator=g, dtype=torch.float64) * 2 - 1)
    near = tensor + noise * (ATOL + RTOL * tensor.abs())  # up to allclose's bound, in every entry
    assert prints.matches(print_, tensor * (1 + 1e-13), RTOL, ATOL)  # computed in another order
    assert torch.allclose(near, tensor, rtol=RTOL, atol=ATOL)
    assert prints.matches(print_, near, RTOL, ATOL)
    other = tensor.clone()
    other[3, 5] += 1e-2
    assert not prints.matches(print_, other, RTOL, ATOL)
    assert not prints.matches(print_, tensor.T.contiguous(), RTOL, ATOL)
    assert not prints.matches(print_, -tensor, RTOL, ATOL)


def test_course_init_writes_the_fingerprints_beside_the_notebook(tmp_path):
    from grader.course import load as load_course
    from grader.lms.course_init import init

    course = load_course(ROOT / "course.yml")
    init(course, tmp_path / "course")
    written = tmp_path / "course" / "source" / course.assignment / prints.FILE
    data = json.loads(written.read_text())
    assert data["spec"] == "makemore-mlp" and data["format"] == prints.FORMAT
    cases = own_cases("makemore-mlp")
    assert set(data["cases"]) == {c.config.name for c in cases}
    exercise = load("makemore-mlp")
    assert {g for per in data["cases"].values() for g in per} == set(data["slips"]) == \
        {a.grade_id for a in exercise.answers if a.kind in (ATOMIC, FUSED, FUNCTION)}


def test_the_file_lists_no_sentence_and_a_slip_opens_only_its_own(tmp_path):
    """The sentences would hint at right formulas (the sigmoid's derivative, index_add): each is sealed by
    its slip's values, so the file holds none, and only an answer that is the slip opens it."""
    spec = "makemore-mlp"
    slip_prints.write(tmp_path, spec, spec)
    text = (tmp_path / prints.FILE).read_text()
    case = own_cases(spec)[0]
    answer = case.exercise.by_grade_id["dhpreact"]
    values = slip_values(case, answer, CHAIN)
    assert values and not [s for _, s, _ in values if s in text]
    assert "index_add" not in text and "(1 - h)" not in text
    (key, sentence, tensor), (_, _, other) = values[0], values[1]
    sealed = json.loads(text)["cases"][case.config.name]["dhpreact"][CHAIN]["prints"][key]["s"]
    assert prints.unseal(sealed, tensor) == sentence
    assert prints.unseal(sealed, tensor * (1 + 1e-13)) == sentence  # computed in another order
    assert prints.unseal(sealed, other) is None


READ = """
import json, sys, torch
import torch.nn.functional as F
sys.modules["grader.derive"] = None  # as in backprop-ninja-student
from grader.judge.configs import generate
from grader.judge.diagnose import name
from grader.judge.exam import CHAIN, prepare
from grader.student.selfcheck import choose_rule_table, own_cases
choose_rule_table()
spec, grade_id, code = sys.argv[1:4]
cases = [*own_cases(spec), prepare(generate(spec, "the notebook's own batch", 1)[0])]
answer = cases[0].exercise.by_grade_id[grade_id]
tensors = []
for case in cases:
    namespace = {**case.values, **case.upstream(answer, CHAIN), **case.sizes, "torch": torch, "F": F}
    exec(code, namespace)
    tensors.append(namespace[answer.variable].detach().to(torch.float64))
print(json.dumps(name(list(zip(cases, tensors)), answer, CHAIN, 1e-5, 1e-8, code=code)))
"""


def test_without_the_rule_table_a_slip_the_code_never_wrote_is_not_said_either(tmp_path):
    """The instructor trial's VAE, in a student's environment: dlogvar's KL branch forgotten has the values of
    the slip "leaves out the derivative of exp" (the branch's two terms cancel without it), which reads dkl and
    logvar, names the code never reads. The grader reads that in the rule table; the self-check, in what each
    slip's fingerprint seals beside its sentence, so it says the forgotten branch as the grader does, and the
    file still spells none of the names."""
    spec = str(ROOT / "tests" / "exercises" / "vae.py") + ":EXERCISE"
    folder = tmp_path / "released"
    folder.mkdir()
    slip_prints.write(folder, spec, _notebook_spec(spec))
    (folder / "vae.py").write_bytes((ROOT / "tests" / "exercises" / "vae.py").read_bytes())
    sealed = [made["r"] for per_answer in json.loads((folder / prints.FILE).read_text())["cases"].values()
              for per_check in per_answer.values() for made in per_check.values()
              for made in made["prints"].values() if "r" in made]
    assert sealed and all(re.fullmatch("[0-9a-f]+", r) for r in sealed)
    code = "dlogvar = 0.5 * std * dstd"
    done = subprocess.run([sys.executable, "-c", READ, _notebook_spec(spec), "dlogvar", code], cwd=folder,
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    line = json.loads(done.stdout)
    assert line.startswith("your dlogvar misses the branch through kl") and "exp" not in line, line
