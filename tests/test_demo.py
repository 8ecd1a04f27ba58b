"""The README's first command: `backprop-ninja demo` runs the bundled course through nbgrader."""
import json
import warnings

import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.vocabulary import Flag
from helpers.paths import COURSE, ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    result = CliRunner().invoke(main, ["demo", "--course", str(ROOT / "course.yml"), "--out", str(out)])
    return result, out


def test_the_demo_succeeds_and_prints_the_class(demo):
    result, _ = demo
    assert result.exit_code == 0, result.output
    full = f"{COURSE.max_score:g}"
    rows = {line.split()[0]: line for line in result.output.splitlines() if f" / {full}" in line}
    assert set(rows) == {"ada", "ben", "cy", "dee", "eve"}
    assert f"{full} / {full}" in rows["ada"] and rows["dee"].split()[1] == "0"
    assert "dcounts" in rows["ben"] and "dC" in rows["ben"]


def test_the_gradebook_has_a_score_per_tensor_and_feedback_is_released(demo):
    from nbgrader.api import Gradebook

    _, out = demo
    course = out / "course"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
            cy = {g.name: g.score for g in gb.find_submission_notebook("backprop_ninja", "backprop_ninja", "cy").grades}
    assert cy["check_dbnmeani"] == 0.5 and cy["check_db1"] == 0.5 and cy["check_dlogprobs"] == 0
    assert cy["check_dprobs"] == 1 and cy["check_ex4_dC"] == 2
    feedback = course / "feedback"
    assert "misses the branch through counts_sum" in (feedback / "ben/backprop_ninja/backprop_ninja.html").read_text()
    blank = (feedback / "dee" / "backprop_ninja" / "backprop_ninja.html").read_text()
    assert "not attempted" in blank
    assert "BEGIN SOLUTION" not in blank and "index_add(0, Xb" not in blank and "torch.ones_like(bndiff2)" not in blank


def test_the_class_report_comes_from_autograde_alone(demo):
    """Autograde wrote each result (nbgrader_config.py's GradeInSandbox.results): nothing graded twice."""
    result, out = demo
    results = out / "course" / "results"
    assert sorted(p.parent.parent.name for p in results.rglob("*.json")) == ["ada", "ben", "cy", "dee", "eve"]
    assert str(results / "report.html") in " ".join(result.output.split())
    assert not (out / "results").exists()


def test_formgrader_shows_the_flagged_submission(demo):
    """eve's answer cells import, exit and print a forged score: her submission is flagged in the gradebook,
    which formgrader's "Flagged?" column shows; the others are not."""
    from nbgrader.api import Gradebook

    _, out = demo
    flags = {json_result.parent.parent.name: json.loads(json_result.read_text())["flags"]
             for json_result in (out / "course" / "results").rglob("*.json")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}") as gb:
            flagged = {s: gb.find_submission_notebook("backprop_ninja", "backprop_ninja", s).flagged for s in flags}
    assert flags["eve"] and flagged["eve"]
    assert flagged == {s: any(Flag.is_integrity(k["kind"]) for k in f) for s, f in flags.items()}  # errors never flag
