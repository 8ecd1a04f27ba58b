"""Batches that are stopped, rerun or split: --resume keeps what is still valid, --shard splits
deterministically, and both give the results a single full run gives."""
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.cli import main
from grader.sandbox import parent as sandbox
from helpers.notebooks import submission, write
from helpers.paths import COURSE_FILE

NAMES = ("a-right", "b-wrong", "c-blank", "d-right")


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    for name in NAMES:
        replace = {"b-wrong": {"dcounts": "dcounts = counts_sum_inv * dprobs\n"},
                   "c-blank": {"dprobs": "dprobs = None  # TODO\n"}}.get(name, {})
        write(root / "subs" / f"{name}.ipynb", submission(replace=replace))
    return root


def grade(batch, out, *extra):
    result = CliRunner().invoke(main, ["grade", str(batch / "subs"), "--out", str(out), "--course", str(COURSE_FILE),
                                       "--jobs", "2", *extra])
    assert result.exit_code == 0, result.output
    return result


def scores(out: Path) -> dict[str, dict]:
    return {p.stem: {t["name"]: t["score"] for t in json.loads(p.read_text())["tests"]} for p in out.glob("*.json")}


def test_resume_runs_only_what_changed(batch, tmp_path, monkeypatch):
    out = tmp_path / "out"
    grade(batch, out)
    first = scores(out)
    runs = []
    real = sandbox.run
    monkeypatch.setattr(sandbox, "run", lambda cells, *a, **k: runs.append(cells) or real(cells, *a, **k))
    again = grade(batch, out, "--resume")
    assert runs == [] and again.output.count("kept ") == len(NAMES)
    assert scores(out) == first
    assert re.search(r"a-right\s+51 / 51", again.output)
    changed = batch / "subs" / "d-right.ipynb"
    write(changed, submission(replace={"dprobs": "dprobs = probs * dlogprobs\n"}))
    grade(batch, out, "--resume")
    assert len(runs) == 1
    assert scores(out)["d-right"]["dprobs"] == 0 and scores(out)["a-right"] == first["a-right"]



def test_resume_regrades_everyone_when_the_hidden_draw_changed(batch, tmp_path, monkeypatch):
    """The same grader version and course.yml with another draw of the hidden configurations (a fix to the
    draw, as when every size came to be drawn on both sides of the lecture's) must not keep a result graded
    on the earlier sizes beside results graded on the new ones."""
    import dataclasses

    from grader.pipeline import grading

    out = tmp_path / "out"
    grade(batch, out)
    real = grading.generate

    def redrawn(spec, salt, count):
        first, *rest = real(spec, salt, count)
        return [dataclasses.replace(first, seed=first.seed + 1), *rest]
    monkeypatch.setattr(grading, "generate", redrawn)
    again = grade(batch, out, "--resume")
    assert again.output.count("kept ") == 0, again.output


def test_shards_are_disjoint_cover_the_batch_and_agree_with_one_run(batch, tmp_path):
    whole = tmp_path / "whole"
    grade(batch, whole)
    parts = tmp_path / "parts"
    grade(batch, parts, "--shard", "1/2")
    grade(batch, parts, "--shard", "2/2")
    assert sorted(p.name for p in parts.glob("grades.shard-*.csv")) == ["grades.shard-1-of-2.csv",
                                                                       "grades.shard-2-of-2.csv"]
    rows = [line.split(",")[0] for f in sorted(parts.glob("grades.shard-*.csv"))
            for line in f.read_text().splitlines()[1:]]
    assert sorted(rows) == sorted(NAMES) and len(rows) == len(set(rows))
    assert scores(parts) == scores(whole)


@pytest.mark.parametrize("value", ["0/2", "3/2", "x", "1/0"])
def test_a_bad_shard_is_a_clear_usage_error(batch, tmp_path, value):
    result = CliRunner().invoke(main, ["grade", str(batch / "subs"), "--out", str(tmp_path),
                                       "--course", str(COURSE_FILE), "--shard", value])
    assert result.exit_code == 2 and "--shard" in result.output and "Traceback" not in result.output


def test_an_interrupted_batch_keeps_its_finished_chunks_and_resume_finishes_it(batch, tmp_path, monkeypatch):
    from grader.pipeline import batch as grading

    out = tmp_path / "out"
    monkeypatch.setattr(grading, "CHUNK", 2)
    real, written = grading.results.write_result, []

    def write_result(folder, result):
        if len(written) == 2:
            raise KeyboardInterrupt  # Ctrl-C as the second chunk's results come in
        written.append(result.submission)
        return real(folder, result)

    monkeypatch.setattr(grading.results, "write_result", write_result)
    stopped = CliRunner().invoke(main, ["grade", str(batch / "subs"), "--out", str(out), "--course", str(COURSE_FILE)])
    assert stopped.exit_code == 130 and "rerun with --resume" in stopped.output
    assert sorted(scores(out)) == sorted(written)  # the first chunk's results, whole, and nothing else
    assert not list(out.rglob("*.tmp"))
    monkeypatch.setattr(grading.results, "write_result", real)
    finished = grade(batch, out, "--resume")
    assert finished.output.count("kept ") == 2 and sorted(scores(out)) == sorted(NAMES)


def test_a_stopped_batch_leaves_its_finished_results_as_the_gradebook_holds_them(batch, tmp_path):
    """A TA trial: the fast route killed mid-batch left each finished student's file and page at the grader's
    score, without the late penalty and TA's score the gradebook already held, until the next report. Each
    result is settled (grader.lms.gradebook.Recorder.settle) as soon as it is recorded; one whose recording
    was stopped keeps the grader's score, as the gradebook holds none of it."""
    from grader.course import load
    from grader.outputs import final
    from grader.pipeline import batch as grading

    out, recorded = tmp_path / "out", []

    def record(submission, result, kept=False):
        if len(recorded) == 2:
            raise KeyboardInterrupt  # stopped while the third is recorded
        recorded.append(submission.id)

    def settle(results):  # as a gradebook holding a late penalty of 0.5 for every submission settles them
        for result in results:
            final.adjust(result, {}, 0.5)
        assert not final.written(out, results)
        return results

    with pytest.raises(KeyboardInterrupt):
        grading.grade([batch / "subs"], load(COURSE_FILE), out, record=record, settle=settle)
    files = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert len(files) == 3 and set(recorded) < set(files), (recorded, sorted(files))
    for stem, result in files.items():
        graded = sum(t["score"] for t in result["tests"])
        penalty = 0.5 if stem in recorded else 0.0
        assert result["score"] == pytest.approx(graded - penalty), stem
        assert result["extra_data"].get("late_penalty", 0.0) == penalty, stem


@pytest.mark.slow
def test_ctrl_c_on_the_command_stops_it_cleanly_and_resume_finishes_the_batch(batch, tmp_path):
    """A real SIGINT to the command's process group, as a terminal's Ctrl-C sends it, mid-batch."""
    subs = tmp_path / "subs"
    subs.mkdir()
    for copy in range(6):
        for name in NAMES:
            shutil.copy(batch / "subs" / f"{name}.ipynb", subs / f"{copy}-{name}.ipynb")
    out = tmp_path / "out"
    command = [shutil.which("backprop-ninja"), "grade", str(subs), "--out", str(out), "--course", str(COURSE_FILE),
               "--jobs", "2"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not (out.is_dir() and any(out.glob("*.json"))) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    servers = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
               and b"grader.sandbox.zygote" in _read(p / "cmdline")
               and f"PPid:\t{proc.pid}\n" in _read(p / "status").decode()]
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, (stdout, stderr)
    assert "interrupted" in stderr and "--resume" in stderr and "Traceback" not in stderr, stderr
    kept = sorted(scores(out))
    assert 0 < len(kept) < 6 * len(NAMES), kept
    assert not list(out.rglob("*.tmp"))
    assert len(servers) == 1 and not Path(f"/proc/{servers[0]}").exists(), servers  # the fork server is gone too
    finished = grade(tmp_path, out, "--resume")
    assert finished.output.count("kept ") == len(kept)
    assert sorted(scores(out)) == sorted(f"{c}-{n}" for c in range(6) for n in NAMES)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
