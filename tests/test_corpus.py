"""The grader against a corpus of realistic student answers, end to end (notebook -> sandbox -> hidden
suite -> scores and feedback).

- Every wrong answer in corpus/wrong_answers.yml loses credit on exactly its own test (its score is
  `fraction` of the points, 0 unless said otherwise), its feedback names the mistake (`expect`), and
  every other test of the submission keeps full credit: no cascade.
- Every correct alternative in corpus/correct_alternatives.yml gets full credit on every test.
- The reference answers and the solved notebook score the maximum; the stub scores 0 with "not
  attempted" on every test.

Each submission is the solved reference with some answer cells replaced. To keep the run short, entries
of different answer cells share a submission (at most one entry per cell), and the whole corpus is
graded in one batch, as `backprop-ninja grade` would grade a class.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import nbformat
import pytest
import yaml

from grader.exercises.makemore_mlp import EXERCISE
from grader.pipeline.batch import grade
from helpers.paths import COURSE, ROOT, SOLVED, STUB
from solutions import reference

EX4 = EXERCISE.functions[0]

CORPUS = Path(__file__).with_name("corpus")
REFERENCE = reference.cells()

WRONG = yaml.safe_load((CORPUS / "wrong_answers.yml").read_text())
ALTERNATIVES = yaml.safe_load((CORPUS / "correct_alternatives.yml").read_text())
# Mistakes written from the student's side, in no catalogue: what the neighbourhood's search must name.
UNSEEN = yaml.safe_load((CORPUS / "unseen_mistakes.yml").read_text())
KNOWN_MISTAKES = yaml.safe_load((ROOT / "autotests" / "known_mistakes.yml").read_text())

# Exercises 1-3: every grade id must have wrong answers in the corpus.
CELL_GRADE_IDS = tuple(a.grade_id for a in EXERCISE.answers if a.part in (1, 2, 3))


def _cell_of(grade_id: str) -> str:
    """The answer cell a corpus entry replaces: exercise 4's tests all live in one cell."""
    if grade_id == EXERCISE.training.grade_id:
        return EX4.cell
    return EXERCISE.by_grade_id[grade_id].cell_id if grade_id in EXERCISE.by_grade_id else grade_id


def _says(feedback: str, words: str | list[str]) -> bool:
    """Whether the feedback holds the words, or one of several wordings of the same mistake (the search's
    and the rule table's slip say some mistakes each their own way)."""
    return any(w.lower() in feedback.lower() for w in ([words] if isinstance(words, str) else words))


def _cells(entry: dict) -> dict[str, str]:
    """grade id of an answer cell -> its source, for every cell the entry replaces."""
    return {**entry.get("with", {}), _cell_of(entry["grade_id"]): entry["code"]}


def _owned(entry: dict) -> list[str]:
    """The tests an entry must change: its own, plus the downstream ones it declares (exercise 4)."""
    return [entry["grade_id"], *entry.get("affects", [])]


def _may_change(entry: dict) -> list[str]:
    """Also the training check, which a wrong exercise-4 function drives (some mistakes, such as a wrong
    db1, leave the training unchanged: batch norm cancels b1)."""
    return [*_owned(entry), *([EXERCISE.training.grade_id] if _cell_of(entry["grade_id"]) == EX4.cell else [])]


def _pack(prefix: str, entries: list[dict]) -> dict[str, list[int]]:
    """Submission name -> indices of the entries it holds; no two entries of a submission share a cell."""
    groups: list[tuple[set[str], list[int]]] = []
    for index, entry in enumerate(entries):
        need = set(_cells(entry))
        for used, members in groups:
            if not used & need:
                used |= need
                members.append(index)
                break
        else:
            groups.append((need, [index]))
    return {f"{prefix}-{k:02d}": members for k, (_, members) in enumerate(groups)}


WRONG_PACKS = _pack("wrong", WRONG)
ALTERNATIVE_PACKS = _pack("alternative", ALTERNATIVES)
UNSEEN_PACKS = _pack("unseen", UNSEEN)
UNSEEN_SUBMISSION = {i: name for name, members in UNSEEN_PACKS.items() for i in members}
WRONG_SUBMISSION = {i: name for name, members in WRONG_PACKS.items() for i in members}
ALTERNATIVE_SUBMISSION = {i: name for name, members in ALTERNATIVE_PACKS.items() for i in members}


def _stub_cells() -> dict[str, str]:
    """Every answer cell as released: a blank, and for exercise 4 a function returning blanks."""
    cells = {a.cell_id: f"{a.variable} = None  # TODO\n" for a in EXERCISE.answers if a.part in (1, 2, 3)}
    blanks = ", ".join(f'"{p}": None' for p in EXERCISE.network.parameters)
    cells[EX4.cell] = f"def {EX4.name}(params, cache, Yb):\n    return {{{blanks}}}\n"
    return cells


def _write_notebook(cells: dict[str, str], path: Path) -> None:
    """A minimal notebook: only answer cells, with the nbgrader metadata the grader looks them up by."""
    notebook = nbformat.v4.new_notebook()
    for grade_id, source in cells.items():
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["nbgrader"] = {"grade": False, "solution": True, "locked": False,
                                     "grade_id": grade_id, "schema_version": 3}
        notebook.cells.append(cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)


def _submissions() -> dict[str, dict[str, str]]:
    """Submission name -> its answer cells (every answer cell, reference unless replaced)."""
    built = {"reference": dict(REFERENCE), "stub-built": _stub_cells()}
    for packs, entries in ((WRONG_PACKS, WRONG), (ALTERNATIVE_PACKS, ALTERNATIVES), (UNSEEN_PACKS, UNSEEN)):
        for name, members in packs.items():
            cells = dict(REFERENCE)
            for index in members:
                cells.update(_cells(entries[index]))
            built[name] = cells
    return built


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade the whole corpus in one batch: submission name -> its scoring.Result."""
    root = tmp_path_factory.mktemp("corpus")
    submissions = root / "submissions"
    for name, cells in _submissions().items():
        _write_notebook(cells, submissions / f"{name}.ipynb")
    (submissions / "solved-notebook.ipynb").write_bytes(SOLVED.read_bytes())
    (submissions / "stub-released.ipynb").write_bytes(STUB.read_bytes())
    pairs = grade([submissions], COURSE, root / "results", jobs=2)
    return {r.submission: r for _, r in pairs}


def _tests(result) -> dict:
    return {t.name: t for t in result.tests}


def _healthy(result, cells) -> None:
    """No error, and no flag on these answer cells (a packed submission's other cells answer for their own)."""
    assert result.error is None, result.error

    def cell(flag: dict) -> str | None:
        if "cell" in flag:
            return flag["cell"]
        return EXERCISE.by_grade_id[flag["grade_id"]].cell_id if flag.get("grade_id") in EXERCISE.by_grade_id else None

    flags = [f for f in result.flags if f.get("kind") == "grader-error" or cell(f) is None or cell(f) in cells]
    assert not flags, flags


def _param(kind: str, index: int, entry: dict):
    same = [e for e in (WRONG if kind == "wrong" else ALTERNATIVES)[:index] if e["grade_id"] == entry["grade_id"]]
    marks = [pytest.mark.xfail(strict=True, reason=entry["xfail"])] if entry.get("xfail") else []
    return pytest.param(index, id=f"{entry['grade_id']}-{len(same) + 1}", marks=marks)


# ---------------------------------------------------------------------------------------------
# The corpus itself


def test_corpus_is_well_formed():
    cells = set(EXERCISE.answer_cells)
    assert len(WRONG) >= 45 and len(ALTERNATIVES) >= 20
    assert set(REFERENCE) == cells, "reference.cells() must hold exactly the answer cells"
    for entry in WRONG:
        assert set(entry) <= {"grade_id", "code", "expect", "forbid", "fraction", "affects", "xfail"}, entry
        assert entry["grade_id"] in EXERCISE.grade_ids and entry["expect"], entry
        assert 0 <= entry.get("fraction", 0) < 1, entry
        for other in entry.get("affects", []):
            assert EXERCISE.by_grade_id[other].cell_id == _cell_of(entry["grade_id"]) == EX4.cell, entry
    for entry in ALTERNATIVES:
        assert set(entry) <= {"grade_id", "code", "with", "xfail"}, entry
        assert set(_cells(entry)) <= cells, entry
    for entry in WRONG + ALTERNATIVES:
        assert entry["code"].strip() != REFERENCE[_cell_of(entry["grade_id"])].strip(), entry


def test_corpus_covers_every_answer_cell():
    wrong = {e["grade_id"] for e in WRONG}
    assert set(CELL_GRADE_IDS) <= wrong, sorted(set(CELL_GRADE_IDS) - wrong)
    assert sum(EXERCISE.by_grade_id[g].part == 4 for g in (e["grade_id"] for e in WRONG)) >= 3
    assert any(e["grade_id"] == EX4.cell for e in ALTERNATIVES)


def test_packing_never_puts_two_entries_in_one_cell():
    for packs, entries in ((WRONG_PACKS, WRONG), (ALTERNATIVE_PACKS, ALTERNATIVES)):
        for members in packs.values():
            replaced = [cell for i in members for cell in _cells(entries[i])]
            assert len(replaced) == len(set(replaced))


# ---------------------------------------------------------------------------------------------
# End to end


@pytest.mark.parametrize("index", [_param("wrong", i, e) for i, e in enumerate(WRONG)])
def test_wrong_answer_loses_credit_on_its_own_test_only(graded, index):
    entry = WRONG[index]
    name = WRONG_SUBMISSION[index]
    result = graded[name]
    _healthy(result, _cells(entry))
    tests = _tests(result)
    fraction = entry.get("fraction", 0)
    for grade_id in _owned(entry):
        test = tests[grade_id]
        assert test.score == pytest.approx(fraction * test.max_score), (
            f"{grade_id}: scored {test.score} of {test.max_score}, expected {fraction:g} of the points; "
            f"feedback: {test.output}")
        for text in entry["expect"]:
            assert _says(test.output, text), f"{grade_id}: {text!r} not in feedback: {test.output}"
        for text in entry.get("forbid", []):  # the wrong hints the issue found
            assert text.lower() not in test.output.lower(), f"{grade_id}: {text!r} in feedback: {test.output}"
    owned = {g for i in WRONG_PACKS[name] for g in _may_change(WRONG[i])}
    lost = {g: t.output for g, t in tests.items() if g not in owned and t.score != t.max_score}
    assert not lost, f"credit lost on tests no wrong answer of {name} touches: {lost}"


@pytest.mark.parametrize("index", [_param("alternative", i, e) for i, e in enumerate(ALTERNATIVES)])
def test_correct_alternative_gets_full_credit(graded, index):
    entry = ALTERNATIVES[index]
    result = graded[ALTERNATIVE_SUBMISSION[index]]
    _healthy(result, _cells(entry))
    tests = _tests(result)
    mine = [g for g in EXERCISE.grade_ids if _cell_of(g) in _cells(entry)]
    lost = {g: tests[g].output for g in mine if tests[g].score != tests[g].max_score}
    assert not lost, lost
    # The other alternatives of the submission are checked by their own tests; whatever is left is the
    # reference, which must not lose credit either.
    replaced = {c for i in ALTERNATIVE_PACKS[ALTERNATIVE_SUBMISSION[index]] for c in _cells(ALTERNATIVES[i])}
    rest = {g: t.output for g, t in tests.items() if _cell_of(g) not in replaced and t.score != t.max_score}
    assert not rest, rest


@pytest.mark.parametrize("name", ["reference", "solved-notebook"])
def test_solution_scores_the_maximum(graded, name):
    result = graded[name]
    _healthy(result, EXERCISE.answer_cells)
    assert [t.name for t in result.tests] == list(COURSE.points)
    assert result.score == result.max_score == COURSE.max_score
    assert all(t.verdict == "correct" for t in result.tests), [t for t in result.tests if t.verdict != "correct"]


def test_solution_scores_the_maximum_on_other_configurations(tmp_path):
    """Another salt and the most configurations a course may ask for: still full marks."""
    course = dataclasses.replace(COURSE, secret_salt="corpus: another course, another term", configurations=16)
    ((_, result),) = grade([SOLVED], course, tmp_path, jobs=1)
    _healthy(result, EXERCISE.answer_cells)
    assert result.score == result.max_score == course.max_score, [t for t in result.tests if t.score < t.max_score]


@pytest.mark.parametrize("name", ["stub-built", "stub-released"])
def test_stub_scores_zero_not_attempted(graded, name):
    result = graded[name]
    _healthy(result, EXERCISE.answer_cells)
    assert result.score == 0
    assert len(result.tests) == len(EXERCISE.grade_ids)
    for test in result.tests:
        assert test.verdict == "not attempted", (test.name, test.output)
        assert "not attempted" in test.output.lower(), (test.name, test.output)


# ---------------------------------------------------------------------------------------------
# Unseen mistakes: named by the search, never misleading, never costing another tensor

# Words of feedback that claims a specific mistake (a name), as opposed to where the values are wrong.
CLAIMS = ("your ", "misses the branch", "the part flowing", "the local derivative", "a character that",
          "depends on the sizes", "transpose", "keepdim", "extra dimension", "summed over", "all zeros")


def _unseen_feedback(graded, index: int) -> tuple[object, dict]:
    entry = UNSEEN[index]
    result = graded[UNSEEN_SUBMISSION[index]]
    _healthy(result, _cells(entry))
    return _tests(result)[entry["grade_id"]], _tests(result)


def classify(entry: dict, feedback: str) -> str:
    """named: the feedback holds the mistake's name; misleading: it claims another mistake; generic."""
    text = feedback.lower()
    if entry.get("names") and _says(feedback, entry["names"]):
        return "named"
    return "misleading" if any(word in text for word in CLAIMS) else "generic"


@pytest.mark.parametrize("index", range(len(UNSEEN)), ids=[f"{e['grade_id']}-{i}" for i, e in enumerate(UNSEEN)])
def test_unseen_mistake_loses_credit_on_its_own_test_only_and_is_named(graded, index):
    entry = UNSEEN[index]
    test, tests = _unseen_feedback(graded, index)
    assert test.score < test.max_score, test.output
    assert classify(entry, test.output) == ("named" if entry.get("names") else "generic"), test.output
    owned = {g for i in UNSEEN_PACKS[UNSEEN_SUBMISSION[index]] for g in _may_change(UNSEEN[i])}
    lost = {g: t.output for g, t in tests.items() if g not in owned and t.score != t.max_score}
    assert not lost, lost


def test_unseen_mistakes_are_named_often_and_never_misleadingly(graded):
    """The rates README reports: at least 70% named, at most 2% misleading."""
    kinds = [classify(e, _unseen_feedback(graded, i)[0].output) for i, e in enumerate(UNSEEN)]
    rates = {k: kinds.count(k) / len(kinds) for k in ("named", "generic", "misleading")}
    assert len(UNSEEN) >= 80
    print(f"unseen mistakes: {len(kinds)}, " + ", ".join(f"{k} {v:.0%}" for k, v in rates.items()))
    assert rates["named"] >= 0.70 and rates["misleading"] <= 0.02, rates


def test_no_feedback_shows_the_right_formula(graded):
    """Under feedback.hints: named, no line holds a line of the reference answer or a catalogue formula."""
    formulas = {m["formula"] for entries in KNOWN_MISTAKES.values() for m in entries if m.get("formula")}
    answers = {" ".join(line.split()) for source in REFERENCE.values() for line in source.splitlines()
               if "=" in line and not line.strip().startswith(("#", "def ", '"""', "return"))}
    assert COURSE.feedback.hints == "named"
    for result in graded.values():
        for test in result.tests:
            text = " ".join(test.output.split())
            shown = [f for f in formulas | answers if f.strip() in text]
            assert not shown, (test.name, shown, test.output)


@pytest.mark.parametrize("hints", ["formula", "none"])
def test_feedback_hints_formula_shows_the_expression_and_none_names_nothing(tmp_path, hints):
    """feedback.hints: formula may add the right expression; none gives the verdict alone."""
    course = dataclasses.replace(COURSE, feedback=dataclasses.replace(COURSE.feedback, hints=hints))
    cells = {**REFERENCE, "dh": "dh = dlogits @ W2\n", "dhpreact": "dhpreact = (1.0 - hpreact**2) * dh\n"}
    _write_notebook(cells, tmp_path / "submissions" / "student.ipynb")
    ((_, result),) = grade([tmp_path / "submissions"], course, tmp_path / "results", jobs=1)
    tests = _tests(result)
    assert tests["dh"].score == tests["dhpreact"].score == 0
    if hints == "formula":
        assert "(dh = dlogits @ W2.T)" in tests["dh"].output, tests["dh"].output
        assert "uses hpreact where the derivative of tanh needs h" in tests["dhpreact"].output
    else:
        assert "transposed" not in tests["dh"].output and "cannot be multiplied" in tests["dh"].output
        output = tests["dhpreact"].output
        assert output.startswith("dhpreact: wrong values (max abs diff") and ";" not in output, output
