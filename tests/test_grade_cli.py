"""`backprop-ninja grade`, driven as a TA would: a folder of submissions in, one Gradescope results file
per submission, grades.csv and a table out.

The batch is graded twice, once in-process with click's CliRunner (--jobs 1) and once through the
installed command in a subprocess (--jobs 2): each run costs seconds, and the pair also shows that a
batch grades the same way twice and whatever the number of jobs.
"""
from __future__ import annotations

import csv
import gc
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli import main
from helpers.notebooks import fingerprint, submission, write
from helpers.paths import COURSE, COURSE_FILE, STUB

GRADE_IDS = list(COURSE.points)

WRONG = {
    "dcounts": "dcounts = counts_sum_inv * dprobs\n",         # misses the branch through counts_sum: 0
    "db1": "db1 = torch.zeros_like(b1)\n",                    # right only on the chain: chain_only_credit
    "dbnmeani": "dbnmeani = (-dbndiff).sum(0)\n",              # the lecture's (H,): squeezable_shape_credit
}
DELETED = "dC"
IDS = ["ada/backprop_ninja", "ben/backprop_ninja", "dee/backprop_ninja", "junk/backprop_ninja"]


@pytest.fixture(scope="module")
def submissions(tmp_path_factory):
    root = tmp_path_factory.mktemp("batch") / "submissions"
    write(root / "ada" / "backprop_ninja.ipynb", submission())
    write(root / "ben" / "backprop_ninja.ipynb", submission(replace=WRONG, drop=[DELETED]))
    (root / "dee").mkdir(parents=True)
    shutil.copy(STUB, root / "dee" / "backprop_ninja.ipynb")  # the released notebook, blanks and all
    (root / "junk").mkdir()
    (root / "junk" / "backprop_ninja.ipynb").write_bytes(b"this is not a notebook\n")
    (root / "junk" / "notes.txt").write_text("not a notebook either, and not .ipynb")
    write(root / "ada" / ".ipynb_checkpoints" / "backprop_ninja-checkpoint.ipynb", submission(drop=["dW1"]))
    return root


@pytest.fixture(scope="module")
def before(submissions):
    return fingerprint(submissions)


@pytest.fixture(scope="module")
def in_process(submissions, before, tmp_path_factory):
    out = tmp_path_factory.mktemp("results-cli")
    result = CliRunner().invoke(main, ["grade", str(submissions), "--out", str(out), "--course", str(COURSE_FILE),
                                       "--jobs", "1"])
    return result, out


@pytest.fixture(scope="module")
def command(submissions, before, in_process, tmp_path_factory):
    out = tmp_path_factory.mktemp("results-subprocess")
    exe = shutil.which("backprop-ninja")
    assert exe, "the backprop-ninja command is not installed (pip install -e .)"
    # A TA's pytest options in the environment change nothing: the hidden suite runs without them.
    env = {**os.environ, "PYTEST_ADDOPTS": "-x -k no_such_test", "PYTEST_PLUGINS": "no_such_plugin"}
    done = subprocess.run([exe, "grade", str(submissions), "--out", str(out), "--course", str(COURSE_FILE),
                           "--jobs", "2"], capture_output=True, text=True, cwd=tmp_path_factory.mktemp("cwd"),
                          timeout=600, env=env)
    return done, out


def results(out: Path) -> dict[str, dict]:
    return {sid: json.loads((out / f"{sid}.json").read_text(encoding="utf-8")) for sid in IDS}


def scores(result: dict) -> dict[str, float]:
    return {t["name"]: t["score"] for t in result["tests"]}


# ---------------------------------------------------------------------------------------------
# One batch, in process


def test_collection_is_on_after_a_batch_and_start_up_objects_are_frozen(in_process):
    """The command pauses garbage collection while it starts, then freezes what start-up built."""
    assert gc.isenabled()
    assert gc.get_freeze_count() > 100_000


def test_grading_exits_0_even_when_some_scored_0(in_process):
    result, _ = in_process
    assert result.exit_code == 0, (result.output, result.exception)
    assert result.exception is None


def test_one_result_file_per_submission_and_grades_csv_and_nothing_else(in_process):
    _, out = in_process
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == sorted([*(f"{sid}.json" for sid in IDS), "grades.csv"])
    # Written atomically: no temporary file is left behind.
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".")]


def test_results_follow_the_gradescope_schema(in_process):
    _, out = in_process
    for sid, r in results(out).items():
        # Gradescope's schema makes the total optional (the tests' sum): a file no reader takes has none
        if r["output"].startswith("not a "):
            assert "score" not in r, sid
        else:
            assert isinstance(r["score"], (int, float)) and not isinstance(r["score"], bool), sid
        assert isinstance(r["max_score"], (int, float)) and r["max_score"] == COURSE.max_score, sid
        assert isinstance(r.get("output", ""), str)
        assert isinstance(r["execution_time"], (int, float)) and r["execution_time"] >= 0
        assert isinstance(r["flags"], list) and all(isinstance(f, dict) for f in r["flags"])
        assert [t["name"] for t in r["tests"]] == GRADE_IDS, sid
        for t in r["tests"]:
            assert set(t) >= {"name", "score", "max_score", "status", "output"}, t
            assert isinstance(t["score"], (int, float)) and isinstance(t["max_score"], (int, float))
            assert t["max_score"] == COURSE.points[t["name"]]
            assert 0 <= t["score"] <= t["max_score"]
            assert t["status"] in ("passed", "failed")
            assert (t["status"] == "passed") == (t["score"] >= t["max_score"])
            assert isinstance(t["output"], str) and t["output"].strip()
        assert r.get("score", 0) == pytest.approx(sum(t["score"] for t in r["tests"]))
        assert r["max_score"] == pytest.approx(sum(t["max_score"] for t in r["tests"]))


def test_the_reference_submission_gets_full_marks(in_process):
    _, out = in_process
    ada = results(out)["ada/backprop_ninja"]
    assert ada["score"] == ada["max_score"] == COURSE.max_score
    assert all(t["status"] == "passed" for t in ada["tests"])
    assert ada["flags"] == []


def test_a_submission_with_a_few_wrong_cells(in_process):
    _, out = in_process
    ben = results(out)["ben/backprop_ninja"]
    by_id = {t["name"]: t for t in ben["tests"]}
    policy = COURSE.policy
    expected = dict(COURSE.points)
    expected["dcounts"] = 0
    expected["db1"] = COURSE.points["db1"] * policy.chain_only_credit
    expected["dbnmeani"] = COURSE.points["dbnmeani"] * policy.squeezable_shape_credit
    expected[DELETED] = 0
    assert scores(ben) == pytest.approx(expected)
    assert ben["score"] == pytest.approx(sum(expected.values()))
    assert "branch" in by_id["dcounts"]["output"]
    assert "'dC'" in by_id["dC"]["output"]
    assert "shape" in by_id["dbnmeani"]["output"]
    for gid in ("dcounts", "db1", "dbnmeani", DELETED):
        assert by_id[gid]["status"] == "failed"


def test_the_blank_stub_scores_0_as_not_attempted(in_process):
    _, out = in_process
    dee = results(out)["dee/backprop_ninja"]
    assert dee["score"] == 0
    assert all(t["score"] == 0 and t["status"] == "failed" for t in dee["tests"])
    assert all("not attempted" in t["output"] for t in dee["tests"]), [t["output"] for t in dee["tests"]][:3]


def test_a_file_that_is_not_a_notebook_gets_a_result_saying_so(in_process):
    _, out = in_process
    junk = results(out)["junk/backprop_ninja"]
    # graded by neither route (nbgrader cannot read it either): no score at the top, where it would read as 0
    assert "score" not in junk and junk["output"].startswith("not a notebook")
    assert "not valid JSON" in junk["output"]
    assert all(t["score"] == 0 and "not valid JSON" in t["output"] for t in junk["tests"])
    from grader.outputs import feedback_page
    from grader.outputs.results import load_result

    page = feedback_page.fragment(load_result(out / "junk" / "backprop_ninja.json"))
    assert 'class="bpn-total"' not in page and " incorrect<" not in page and "<b>Not graded:</b> not a notebook" in page


def test_grades_csv_has_a_row_per_submission_and_a_column_per_grade_id(in_process):
    _, out = in_process
    text = (out / "grades.csv").read_text(encoding="utf-8")
    reader = csv.DictReader(io.StringIO(text))
    rows = list(reader)
    assert [r["submission"] for r in rows] == IDS
    assert [f for f in reader.fieldnames if f in COURSE.points] == GRADE_IDS
    assert len(reader.fieldnames) == len(set(reader.fieldnames))
    by_sid = results(out)
    for row in rows:
        r = by_sid[row["submission"]]
        assert float(row["max_score"]) == pytest.approx(r["max_score"])
        if row["submission"].startswith("junk/"):  # a TA trial: its zeros read as a score; no route records one
            assert [row["score"], *(row[g] for g in GRADE_IDS)] == [""] * (1 + len(GRADE_IDS)), row
            assert "not valid JSON" in row["error"]
            continue
        assert float(row["score"]) == pytest.approx(r["score"])
        assert {g: float(row[g]) for g in GRADE_IDS} == pytest.approx(scores(r))


def test_the_table_lists_every_submission(in_process):
    result, _ = in_process
    stdout = result.stdout
    for sid in IDS:
        line = next((row for row in stdout.splitlines() if row.split() and row.split()[0] == sid), None)
        assert line is not None, f"{sid} missing from the table:\n{stdout}"
    ada = next(row for row in stdout.splitlines() if row.startswith("ada/"))
    assert f"{COURSE.max_score:g} / {COURSE.max_score:g}" in ada
    junk = next(row for row in stdout.splitlines() if row.startswith("junk/"))
    assert junk.split()[1:8] == ["-", "/", f"{COURSE.max_score:g}", "-", "-", "-", "-"], junk  # not "0", "36 wrong"
    assert "not graded: not a notebook" in junk, junk
    assert "3 submission(s) graded, 1 not graded (see the notes)" in stdout


# ---------------------------------------------------------------------------------------------
# The same batch again, through the installed command, with two jobs


def _without_time(text: str) -> str:
    """The result file less what measures time: the run's duration and the exercise-4 timings."""
    text = re.sub(r'"execution_time": [0-9.eE+-]+', '"execution_time": 0', text)
    return re.sub(r'"(\w+)_ms_per_step": [0-9.eE+-]+', r'"\1_ms_per_step": 0', text)


def test_the_installed_command_grades_the_same_batch(command):
    done, out = command
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    for sid in IDS:
        assert any(row.split() and row.split()[0] == sid for row in done.stdout.splitlines()), done.stdout


def test_grading_twice_gives_the_same_files_apart_from_time(in_process, command):
    (_, first), (_, second) = in_process, command
    for sid in IDS:
        a = (first / f"{sid}.json").read_text(encoding="utf-8")
        b = (second / f"{sid}.json").read_text(encoding="utf-8")
        assert '"execution_time"' in a
        assert _without_time(a) == _without_time(b), sid
    assert (first / "grades.csv").read_bytes() == (second / "grades.csv").read_bytes()


def test_jobs_1_and_jobs_2_give_the_same_scores(in_process, command):
    (_, first), (_, second) = in_process, command
    one, two = results(first), results(second)
    for sid in IDS:
        assert one[sid].get("score") == two[sid].get("score"), sid
        assert scores(one[sid]) == scores(two[sid]), sid


def test_submitted_files_are_unchanged_by_grading(submissions, before, in_process, command):
    assert fingerprint(submissions) == before


def test_no_temporary_files_in_either_output(in_process, command):
    for out in (in_process[1], command[1]):
        assert not [p for p in out.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".")]


# ---------------------------------------------------------------------------------------------
# Errors a TA makes, and the command's surface


@pytest.mark.parametrize("edit, key", [
    (lambda text: text + "\nsecret_sault: oops\n", "secret_sault"),
    (lambda text: text.replace("  cell_timeout_seconds: 10\n", "  cell_timeout_seconds: 10\n  cell_timeout_secs: 5\n"),
     "cell_timeout_secs"),
])
def test_a_bad_course_file_is_one_line_naming_the_key(tmp_path, edit, key):
    course = tmp_path / "course.yml"
    text = edit(COURSE_FILE.read_text(encoding="utf-8"))
    assert key in text
    course.write_text(text, encoding="utf-8")
    notebook = write(tmp_path / "subs" / "a.ipynb", submission())
    result = CliRunner().invoke(main, ["grade", str(notebook), "--out", str(tmp_path / "out"), "--course", str(course)])
    assert result.exit_code != 0
    assert isinstance(result.exception, SystemExit)  # a handled error, not a crash
    lines = [row for row in result.output.splitlines() if row.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("Error: ") and key in lines[0] and "unknown key" in lines[0]
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()
    assert gc.isenabled(), "the command paused garbage collection for its start-up and left it off"


def test_a_copy_of_course_yml_away_from_its_hidden_suite_is_one_line_saying_so(tmp_path):
    """A student trial's self-learner copied the checkout's course.yml beside the notebook: `[Errno 2] No such file
    or directory: .../autotests/pytest.ini`, after grading had begun."""
    course = tmp_path / "course.yml"
    course.write_text(COURSE_FILE.read_text(encoding="utf-8"), encoding="utf-8")
    notebook = write(tmp_path / "subs" / "a.ipynb", submission())
    result = CliRunner().invoke(main, ["grade", str(notebook), "--out", str(tmp_path / "out"), "--course", str(course)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    lines = [row for row in result.output.splitlines() if row.strip()]
    assert lines == [f"Error: {course}: autotests: {tmp_path / 'autotests'} holds no hidden suite (its pytest.ini): "
                     "grade with the course.yml beside its autotests/ folder, or make a course of your own with "
                     "backprop-ninja course init"], result.output
    assert not (tmp_path / "out").exists()


def test_a_missing_path_is_a_usage_error(tmp_path):
    missing = tmp_path / "no-such-folder"
    result = CliRunner().invoke(main, ["grade", str(missing), "--out", str(tmp_path / "out"),
                                      "--course", str(COURSE_FILE)])
    assert result.exit_code == 2
    assert "Usage:" in result.output
    assert "Error:" in result.output and "does not exist" in result.output and str(missing) in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_help_lists_the_commands():
    exe = shutil.which("backprop-ninja")
    assert exe
    done = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == ""
    commands = done.stdout.split("Commands:")[1]
    assert re.search(r"^\s+grade\s", commands, re.M) and re.search(r"^\s+demo\s", commands, re.M)
    done = subprocess.run([exe, "grade", "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    for option in ("--out", "--course", "--jobs"):
        assert option in done.stdout
    assert "default: (the cores)" in " ".join(done.stdout.split())


def test_jobs_default_to_the_cores_this_process_may_use():
    from grader.cli import grade

    jobs = next(p for p in grade.params if p.name == "jobs")
    assert jobs.default == len(os.sched_getaffinity(0))


def test_importing_the_cli_imports_no_heavy_dependency():
    code = ("import grader.cli, sys; heavy = {'torch', 'nbgrader', 'nbformat'} & set(sys.modules); "
            "assert not heavy, heavy")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def _a_graded_class(folder: Path) -> Path:
    from grader.judge.scoring import Result, TestScore
    from grader.outputs.results import write_result
    from grader.vocabulary import Verdict

    result = Result("ada/backprop_ninja", "submitted/ada/backprop_ninja/backprop_ninja.ipynb")
    result.tests = [TestScore("dlogprobs", 1, 1, Verdict.CORRECT, "right"), TestScore("dprobs", 0, 1, Verdict.INCORRECT,
                                                                                   "wrong")]
    write_result(folder / "results", result)
    return folder / "results"


# Each staff command that computes with no tensor, as a user types it: torch's import is a second per call
# (ten on a loaded machine), so none of them may pay it. (Loading an exercise draws trial tensors: report, the
# grade-ids export, course init and solution load one.)
TORCHLESS = (["--help"], ["course", "check", "course"], ["course", "formgrader", "course"],
             ["export", "results", "--format", "canvas", "--out", "canvas.csv"], ["grade", "--help"])


def test_commands_that_compute_with_no_tensor_never_import_torch(tmp_path):
    _a_graded_class(tmp_path)
    (tmp_path / "course").mkdir(mode=0o700)
    code = ("import json, sys\nfrom grader import cli\ncodes = []\n"
            "for args in json.loads(sys.argv[1]):\n"
            "    try:\n        cli.main(args=args, prog_name='backprop-ninja')\n"
            "    except SystemExit as exc:\n        codes.append(exc.code)\n"
            "print(json.dumps([codes, sorted(m for m in sys.modules if m.partition('.')[0] == 'torch')]))\n")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(TORCHLESS)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env={**os.environ, "HOME": str(tmp_path)})
    codes, loaded = json.loads(done.stdout.splitlines()[-1])
    # formgrader refuses a folder with no nbgrader_config.py, in one line; every other command succeeds
    assert codes == [0, 0, 1, 0, 0], done.stderr
    assert (tmp_path / "canvas.csv").is_file()
    assert loaded == [], loaded


@pytest.mark.parametrize("fault", ["missing", "broken"])
def test_a_command_that_computes_without_torch_says_so_in_one_line_as_the_environments_fault(tmp_path, fault):
    """A command that needs torch, where it is missing (a bare image) or broken (a shared library gone): one
    line that names the environment, exit 1; the commands that compute nothing still work there."""
    shadow = tmp_path / "shadow"
    if fault == "missing":
        (shadow).mkdir()
        (shadow / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    else:
        (shadow / "torch").mkdir(parents=True)
        (shadow / "torch" / "__init__.py").write_text(
            "raise OSError('libtorch_cpu.so: cannot open shared object file: No such file or directory')\n")
    _a_graded_class(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow), os.environ.get("PYTHONPATH", "")])}
    exe = shutil.which("backprop-ninja")
    report = subprocess.run([exe, "report", "results"], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                            env=env)
    assert report.returncode == 1, report.stderr
    assert report.stderr.startswith("Error: environment: torch cannot be imported ("), report.stderr
    assert len(report.stderr.splitlines()) == 1 and "Traceback" not in report.stderr, report.stderr
    assert ("ModuleNotFoundError" if fault == "missing" else "OSError: libtorch_cpu.so") in report.stderr
    export = subprocess.run([exe, "export", "results", "--format", "canvas", "--out", "canvas.csv"],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert export.returncode == 0, export.stderr


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_on_a_terminal_progress_is_a_bar_with_count_rate_and_time_left_under_the_notes():
    from grader.cli import Report
    from grader.pipeline.batch import Tally

    screen = _Terminal()
    with Report(screen) as report:
        report.note("kept a: unchanged since it was graded")
        report.tally(Tally(4, 10, 2.0, 3))
        report.note("ran b in 0.1 s")
        report.tally(Tally(10, 10, 2.5, 0))
    text = screen.getvalue()
    assert text.startswith("kept a: unchanged since it was graded\n")
    assert re.search(r"\rgrading +\[#+-+\] +4/10 +2\.0/s, about 3 s left", text.replace("\x1b[?25l", "")), text
    assert "\r\x1b[Kran b in 0.1 s\n" in text  # a note clears the bar's line, and the bar is drawn again below it
    assert re.search(r"\[#+\] +10/10 +2\.5/s, about 0 s left", text), text
    assert text.endswith("\x1b[?25h\n"), "the cursor is shown again at the end"


def test_in_a_log_progress_is_plain_lines():
    from grader.cli import Report
    from grader.pipeline.batch import Tally

    log = io.StringIO()
    with Report(log) as report:
        report.note("ran a in 0.1 s")
        report.tally(Tally(4, 10, 2.0, 3))
    assert log.getvalue() == "ran a in 0.1 s\n4/10 graded, 2.00 per second, about 3 s left\n"


def test_a_regrade_without_html_makes_an_earlier_page_again(tmp_path):
    """A TA trial: a notebook graded with --html, handed in again and graded without it, kept the earlier page
    beside its new result, its score and all."""
    from grader.outputs import feedback_page

    folder = tmp_path / "submissions"
    write(folder / "ada" / "backprop_ninja.ipynb", submission(replace=WRONG))
    out = tmp_path / "results"
    for html in (["--html"], []):
        done = CliRunner().invoke(main, ["grade", str(folder), "--out", str(out), "--course", str(COURSE_FILE),
                                         "--jobs", "1", *html])
        assert done.exit_code == 0, done.output
        write(folder / "ada" / "backprop_ninja.ipynb", submission())
    sid = "ada/backprop_ninja"
    assert feedback_page.current(out, sid), "the page is of the earlier result"
    page = feedback_page.page_path(out, sid).read_text(encoding="utf-8")
    assert json.loads((out / f"{sid}.json").read_text())["score"] == COURSE.max_score
    assert f'class="bpn-total">Total: {COURSE.max_score:g} / {COURSE.max_score:g}<' in page


def test_grading_one_student_at_a_time_keeps_every_student_in_grades_csv(submissions, tmp_path):
    """A TA grading late hand-ins one at a time into the class's folder: grades.csv, the file a TA opens first,
    held the student graded last and no one else, where every result and the report held the whole class."""
    submitted, out = tmp_path / "submitted", tmp_path / "results"
    for student in ("ada", "ben"):  # nbgrader's layout, which names a student's notebook graded alone
        (submitted / student / "backprop_ninja").mkdir(parents=True)
        shutil.copy(submissions / student / "backprop_ninja.ipynb", submitted / student / "backprop_ninja")
        done = CliRunner().invoke(main, ["grade", str(submitted / student), "--out", str(out),
                                         "--course", str(COURSE_FILE), "--jobs", "1"])
        assert done.exit_code == 0, done.output
    rows = {row["submission"]: row for row in csv.DictReader(io.StringIO((out / "grades.csv").read_text()))}
    ada, ben = "ada/backprop_ninja/backprop_ninja", "ben/backprop_ninja/backprop_ninja"
    assert sorted(rows) == [ada, ben]
    assert float(rows[ada]["score"]) == COURSE.max_score
    assert float(rows[ben]["score"]) == json.loads((out / f"{ben}.json").read_text())["score"] < COURSE.max_score


def test_grade_outside_a_course_folder_says_where_a_course_yml_is_looked_for(tmp_path, monkeypatch):
    """A student trial ran `backprop-ninja grade notebook.ipynb` in its own folder: "course.yml: no such file", with
    no word of --course."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(STUB, tmp_path / "mine.ipynb")
    result = CliRunner().invoke(main, ["grade", "mine.ipynb", "--out", "out"])
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"Error: {tmp_path / 'course.yml'}: no such file; run this in the course's folder, or give its course.yml "
        "with --course")
