"""Flags and credit that say what happened: the flag vocabulary splits errors a student fixes (a syntax
error, a time or memory limit, a crash) from integrity flags (what only someone trying to cheat does);
only the latter mark a submission for review; every route shows the student the same list; a named slip
is said before any guess; and a notebook none of whose answers ran is "not graded" in the table, not
"36 wrong".
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from grader.course import load
from grader.judge import scoring
from grader.judge.exam import CHAIN, LOCAL
from grader.judge.suite import PASSED, WRONG, ItemResult
from grader.lms.gradescope import for_gradescope
from grader.outputs import feedback_page, report
from grader.outputs.results import table
from grader.sandbox import static_check
from grader.vocabulary import Flag, Match, flag_groups
from helpers.paths import COURSE_FILE

COURSE = load(COURSE_FILE)
CHEATS = {Flag.STATIC_CHECK, Flag.FORGED_OUTPUT, Flag.AUTOGRAD, Flag.FORBIDDEN_CALL}


def _scored(refused: dict[str, str], results: dict | None = None, error: str | None = None) -> scoring.Result:
    refusals = static_check.screen(refused, static_check.Allow()).refused
    submission = SimpleNamespace(id="s", path="s.ipynb", error=error, refused=refusals, forged={}, sha256="",
                                 cells={})
    return scoring.score(submission, results or {}, COURSE)


def test_only_what_a_cheat_does_is_an_integrity_flag():
    assert {f for f in Flag if f.integrity} == CHEATS
    assert Flag.is_integrity("a-kind-from-a-newer-grader")  # unknown: kept for review, never dropped


@pytest.mark.parametrize("source", ["dprobs = (1.0 / probs * dlogprobs\n", "dprobs = \x00\n"])
def test_a_cell_python_cannot_read_is_an_error_to_fix_not_an_integrity_flag(source):
    result = _scored({"dprobs": source})
    assert [f["kind"] for f in result.flags] == [Flag.SYNTAX_ERROR]
    assert result.integrity_flags == [] and result.error_flags == result.flags


def test_a_refused_construct_is_still_an_integrity_flag():
    result = _scored({"dprobs": "import os\ndprobs = dlogprobs\n"})
    assert [f["kind"] for f in result.integrity_flags] == [Flag.STATIC_CHECK]


@pytest.mark.parametrize("source", [
    "dprobs = torch.linalg.multi_dot([dlogprobs, torch.linalg.pinv(probs)])\n",  # blind answer sets' inverses
    "import numpy as np\ndprobs = dlogprobs / probs\n",
    "class Helper:\n    pass\ndprobs = dlogprobs / probs\n",
    "try:\n    dprobs = dlogprobs / probs\nexcept ValueError:\n    raise ValueError('shapes')\n",
    "dprobs = F.elu(dlogprobs) / F.elu(dlogprobs) * dlogprobs / probs\n",
])
def test_math_or_python_an_honest_student_writes_is_an_error_to_fix_not_an_integrity_flag(source):
    """Blind answer sets and an instructor trial: `torch.linalg.pinv`, `import numpy as np` left in a cell, a helper
    class marked their students for a cheating review."""
    result = _scored({"dprobs": source})
    assert [f["kind"] for f in result.flags] == [Flag.NOT_ALLOWED]
    assert result.integrity_flags == [] and not Flag.NOT_ALLOWED.integrity


@pytest.mark.parametrize("source", [
    "import numpy as np\ng = probs.grad\n",  # one honest refusal beside one that is not: the cell is flagged
    "class Liar(torch.Tensor):\n    pass\n",
    "try:\n    dprobs = dlogprobs / probs\nexcept BaseException:\n    pass\n",
    "raise SystemExit(0)\n",
    "f = torch.nn.functional\n",
    "dprobs = torch.linalg.torch.autograd.grad(probs.sum(), probs)[0]\n",
])
def test_what_reaches_past_the_math_stays_an_integrity_flag(source):
    assert [f["kind"] for f in _scored({"dprobs": source}).integrity_flags] == [Flag.STATIC_CHECK]


def test_the_class_report_reviews_integrity_flags_and_lists_errors_apart():
    syntax = _scored({"dprobs": "dprobs = (\n"})
    cheat = _scored({"dprobs": "open('/etc/passwd')\n"})
    cheat.submission = "cheat"
    built = report.build([syntax, cheat], COURSE)
    assert [(f["submission"], f["kind"]) for f in built["flags"]] == [("cheat", "static-check")]
    assert any(e["submission"] == "s" and e["error"].startswith("syntax-error (dprobs)") for e in built["errors"])


def test_every_route_shows_the_student_the_same_flags():
    result = _scored({"dprobs": "dprobs = (\n", "dcounts": "import os\n"})
    page = feedback_page.fragment(result)
    groups = flag_groups(result.flags)
    assert [heading for heading, _ in groups] == ["Errors to fix (1)",
                                                  "Integrity flags, which your instructor reviews (1)"]
    for heading, items in groups:
        assert heading in page
        assert all(kind in page for kind, *_ in items)
    data = {"score": 0.0, "max_score": 1.0, "output": "0 / 1", "tests": [], "flags": result.flags, "extra_data": {}}
    shown = for_gradescope(data, log=lambda line: None)["output"]
    assert all(heading in shown for heading, _ in groups) and "syntax error" in shown and "import os" in shown


def test_a_named_slip_right_on_the_chain_is_said_before_any_guess():
    chain = ItemResult(PASSED, Match.APPROXIMATE)
    local = ItemResult(WRONG, Match.WRONG, "with random upstream gradients (a check of this one backward step): "
                       "dlogit_maxes: wrong values; your dlogit_maxes has its sign flipped",
                       mistake="your dlogit_maxes has its sign flipped", named=True)
    test = scoring._one("dlogit_maxes", 1.0, chain, local, COURSE.policy)
    assert test.score == COURSE.policy.chain_only_credit
    assert test.output.index("your dlogit_maxes has its sign flipped") < test.output.index("Partial credit")
    assert "hard-coded" not in test.output and "autograd?" not in test.output
    unnamed = scoring._one("db1", 1.0, chain, ItemResult(WRONG, Match.WRONG, "wrong values"), COURSE.policy,
                           ("dbnraw",))
    assert "it skips dbnraw" in unnamed.output and "autograd" not in unnamed.output, unnamed.output
    # An instructor trial's `dlse = -dlogp.sum(0, keepdim=True).T`, right only because its dlogp is symmetric by
    # the data's construction, was told "it skips dlogp": its code reads it.
    summed = scoring._one("dlse", 1.0, chain, ItemResult(WRONG, Match.WRONG, "wrong values"), COURSE.policy,
                          ("dlogp",), "dlse = -dlogp.sum(0, keepdim=True).T\n")
    assert "it reads dlogp, but its result is right only with this loss's own values of dlogp" in summed.output
    assert "skips" not in summed.output, summed.output
    # Hints are no name: an instructor trial's chain-only answer was told "right in 11 of 256 entries, wrong in
    # 245 ... where the slip does not show", and not what it skips
    hinted = scoring._one("dsim_t", 1.0, chain, ItemResult(WRONG, Match.WRONG, "dsim_t: wrong values; right in 11 of "
                                                           "256 entries, wrong in 245",
                                                           mistake="right in 11 of 256 entries, wrong in 245"),
                          COURSE.policy, ("dloss_ba",))
    assert hinted.output.startswith("right value for this loss, but not this step of the chain rule: it skips "
                                    "dloss_ba") and "does not show" not in hinted.output, hinted.output


def test_a_notebook_none_of_whose_answers_ran_is_not_graded_in_the_table():
    error = "not a notebook: the file is not valid JSON"
    results = {(g, check): ItemResult(WRONG, "", error) for g in COURSE.points for check in (CHAIN, LOCAL)}
    unread = _scored({}, results, error=error)
    assert not unread.graded
    line = table([unread]).splitlines()[1]
    assert "36" not in line.split("not graded")[0] and f"not graded: {error}" in line, line
    assert line.split()[4:8] == ["-", "-", "-", "-"], line
