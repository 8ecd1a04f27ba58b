"""formgrader as a TA sees it, in a real Chromium: the demo's course served by Jupyter Server with
nbgrader's formgrader extension, started in the folder holding the course as a hub starts it in a home
(`course formgrader` names the course); the submission list flags the student whose answer cells carry
integrity flags (eve) and no one else, and one autograded submission opens with its per-tensor feedback
page, which names no student (formgrader grades blind), its grade cells' scores said as scores, not a
bare "0"; after a TA's score and a late penalty, that page says the final total.

formgrader hides names by default and fills its tables with JavaScript from its own API, so the test
waits for the rows the browser draws and maps each row's link to a student through that API.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.vocabulary import Flag
from helpers import formgrader
from helpers.formgrader import serve
from helpers.paths import COURSE, ROOT

ASSIGNMENT, NOTEBOOK = COURSE.assignment, Path(COURSE.notebook).stem

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    out = tmp_path_factory.mktemp("formgrader")
    done = CliRunner().invoke(main, ["demo", "--course", str(ROOT / "course.yml"), "--out", str(out)])
    assert done.exit_code == 0, done.output
    return out / "course"


@pytest.fixture(scope="module")
def server(course, tmp_path_factory):
    """formgrader as a hub starts it: the server in the TA's home, which holds the course; it finds the course
    through the TA's own Jupyter configuration, which `course formgrader` wrote (formgrader listed nothing
    until `c.CourseDirectory.root` was set by hand)."""
    folder, home = tmp_path_factory.mktemp("jupyter"), course.parent
    done = CliRunner().invoke(main, ["course", "formgrader", str(course)],
                              env={"JUPYTER_CONFIG_DIR": str(folder / "config"), "HOME": str(home)})
    assert done.exit_code == 0 and "warning" not in done.output, done.output
    with serve(course, folder, home=home) as url:
        assert [a["name"] for a in formgrader.api(url, "/formgrader/api/assignments")] == [ASSIGNMENT]
        yield url


def submissions(url: str) -> dict[str, str]:
    return formgrader.submissions(url, ASSIGNMENT, NOTEBOOK)


def wait_for(driver, condition, seconds: float = 120):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, seconds).until(condition)


def test_the_submission_list_flags_the_student_with_integrity_flags(course, server, loopback_browser):
    from selenium.webdriver.common.by import By

    students = submissions(server)
    loopback_browser.get(f"{server}/formgrader/gradebook/{ASSIGNMENT}/{NOTEBOOK}")
    rows = wait_for(loopback_browser, lambda d: [r for r in d.find_elements(By.CSS_SELECTOR, "tbody tr")
                                        if r.find_elements(By.CSS_SELECTOR, "a[href*='/formgrader/submissions/']")]
                    if len(d.find_elements(By.CSS_SELECTOR, "tbody tr a[href*='/formgrader/submissions/']"))
                    >= len(students) else False)
    flagged = {}
    for row in rows:
        link = row.find_element(By.CSS_SELECTOR, "a[href*='/formgrader/submissions/']").get_attribute("href")
        student = students[link.rstrip("/").rsplit("/", 1)[1]]
        flagged[student] = bool(row.find_elements(By.CSS_SELECTOR, ".flagged .glyphicon-flag"))
    results = {p.parent.parent.name: json.loads(p.read_text())["flags"] for p in (course / "results").rglob("*.json")}
    assert flagged == {student: any(Flag.is_integrity(f["kind"]) for f in flags) for student, flags in results.items()}
    assert flagged["eve"] and not flagged["ada"]


@pytest.mark.parametrize("student", ["eve", "ada"])
def test_an_autograded_submission_opens_with_its_feedback_page(server, loopback_browser, student):
    from selenium.webdriver.common.by import By

    (submission,) = [i for i, s in submissions(server).items() if s == student]
    loopback_browser.get(f"{server}/formgrader/submissions/{submission}")
    page = wait_for(loopback_browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#bpn-feedback"))[0]
    text = page.text
    # Blind grading: formgrader names no student, and neither does the page inside the notebook it shows.
    assert page.find_element(By.CSS_SELECTOR, "h1").text == f"Feedback for {ASSIGNMENT}/{NOTEBOOK}"
    assert f"{student}/" not in loopback_browser.find_element(By.TAG_NAME, "body").text \
        and student not in loopback_browser.title
    assert "Tensors" in text and "dlogprobs" in text
    integrity = "Integrity flags, which your instructor reviews ("
    if student == "eve":
        assert integrity in text
    else:
        assert integrity not in text and f"Total: {COURSE.max_score:g} / {COURSE.max_score:g}" in text
    # Each grade cell's score reads as one, never as a stray "Out[ ]: 0".
    results = [e.text.strip() for e in loopback_browser.find_elements(By.CSS_SELECTOR, ".output_execute_result")]
    assert results and all(r.startswith("autograded: ") and " point(s)" in r for r in results), results[:5]


def test_the_notebook_formgrader_shows_says_the_final_score(course, server):
    """A TA's manual score and a late penalty set after autograde: the page at the top of the notebook
    formgrader shows says the gradebook's total, as the report and the student's feedback do, not the
    grader's from autograde time."""
    import urllib.request

    from nbgrader.api import Gradebook

    (submission,) = [i for i, s in submissions(server).items() if s == "ada"]
    top = COURSE.max_score
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        grade = gb.find_grade("check_dcounts", NOTEBOOK, ASSIGNMENT, "ada")
        entry = gb.find_submission_notebook(NOTEBOOK, ASSIGNMENT, "ada")
        grade.manual_score, entry.late_submission_penalty = 0.5, 2.0
        gb.db.commit()
    try:
        html = urllib.request.urlopen(f"{server}/formgrader/submissions/{submission}/", timeout=120).read().decode()
        final = top - COURSE.points["dcounts"] + 0.5 - 2.0
        assert f"Total: {final:g} / {top:g} (after a late penalty of 2)" in html
        assert "your instructor set this score: 0.5 / 1 (the grader gave 1)" in html
    finally:
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
            gb.find_grade("check_dcounts", NOTEBOOK, ASSIGNMENT, "ada").manual_score = None
            gb.find_submission_notebook(NOTEBOOK, ASSIGNMENT, "ada").late_submission_penalty = None
            gb.db.commit()
