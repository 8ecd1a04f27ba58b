"""The makemore course grades exactly as it did before the engine learnt to grade any exercise.

tests/golden/submissions holds the corpus's submissions (the reference with wrong answers, correct
alternatives and unseen mistakes packed in, the solved notebook, the stubs, a refused, a broken, a raising
and a wrong-shaped cell), frozen as notebooks; tests/golden/results what the grader said about each one,
with what differs from run to run or machine to machine (seconds, the version, the input digest, which
hashes the course files too, the walls this machine has) left out. A change that moves a score, a word of
feedback, a flag or a named mistake fails here; one that means to regenerates the files with
`python -m tests.test_golden` and says why in its commit.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# Not helpers.paths: `python -m tests.test_golden` runs this file outside pytest, without tests/ on sys.path.
ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).with_name("golden")
SUBMISSIONS = GOLDEN / "submissions"
EXPECTED = GOLDEN / "results"
# Measurements kept for the record: they differ from run to run.
TIMINGS = ("manual_backward_ms_per_step", "autograd_backward_ms_per_step")


def _stable(result: dict) -> dict:
    extra = {k: v for k, v in result["extra_data"].items()
             if k not in ("grader_version", "isolation", "path", "input_digest", "notebook_sha256")}
    tests = [{**t, "extra_data": {k: v for k, v in t["extra_data"].items() if k not in TIMINGS}}
             if "extra_data" in t else t for t in result["tests"]]
    return {**{k: v for k, v in result.items() if k != "execution_time"}, "extra_data": extra, "tests": tests}


def _grade(out: Path) -> dict[str, str]:
    """File name -> its stable text, for every result of grading the frozen submissions."""
    subprocess.run([sys.executable, "-c", "from grader.cli import main; main()", "grade", str(SUBMISSIONS),
                    "--out", str(out), "--course", str(ROOT / "course.yml")], check=True, capture_output=True, cwd=ROOT)
    texts = {p.name: json.dumps(_stable(json.loads(p.read_text())), indent=1, sort_keys=True) + "\n"
             for p in sorted(out.glob("*.json"))}
    texts["grades.csv"] = (out / "grades.csv").read_text()
    return texts


def test_the_corpus_grades_as_it_did(tmp_path):
    got = _grade(tmp_path / "results")
    expected = {p.name: p.read_text() for p in sorted(EXPECTED.iterdir())}
    assert sorted(got) == sorted(expected)
    for name, text in expected.items():
        assert got[name] == text, f"{name} changed"


if __name__ == "__main__":
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        texts = _grade(Path(tmp) / "results")
    shutil.rmtree(EXPECTED, ignore_errors=True)
    EXPECTED.mkdir()
    for name, text in texts.items():
        (EXPECTED / name).write_text(text)
    print(f"{len(texts)} files written to {EXPECTED}")
