"""benchmarks/train_lecture.py runs end to end on a tiny step count (its numbers are in benchmarks/README.md)."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from helpers.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "train_lecture.py"


def section(output: str, heading: str) -> list[str]:
    """The indented lines under the line that starts with `heading`, up to the next empty line (the
    script indents everything a notebook cell prints, so an empty sample is "  ", not "")."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading)) + 1
    body = []
    for line in lines[start:]:
        if not line:
            break
        body.append(line)
    return body


@pytest.mark.slow
def test_train_lecture_prints_losses_samples_and_seconds_per_step(tmp_path):
    # From another folder, on the default data: the script finds the notebook and the package itself.
    run = subprocess.run([sys.executable, str(SCRIPT), "--steps", "200", "--timing-steps", "100",
                          "--timing-rounds", "1", "--warmup", "20"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "names.txt shipped with the package (default)" in out
    assert re.search(r"^  step +199/200: loss \d+\.\d{4}$", out, re.M)

    losses = section(out, "loss, batch norm calibrated")
    assert [line.split()[0] for line in losses] == ["train", "val"]
    for line in losses:
        assert re.fullmatch(r"  (train|val) loss \d+\.\d{4}", line), line
        assert 1.5 < float(line.split()[-1]) < 3.5, line  # 200 steps: well below log(27) = 3.30 at best

    samples = section(out, "20 samples")
    assert len(samples) == 20
    assert all(re.fullmatch(r"  [a-z]*", s) for s in samples), samples

    timing = section(out, "seconds per step")
    for kind in ("manual backward", "autograd backward"):
        assert any(re.match(rf"  {kind} +\d+\.\d{{6}} s/step", line) for line in timing), (kind, timing)
    assert any(re.fullmatch(r"  autograd / manual \d+\.\d\dx", line) for line in timing), timing
    assert not run.stderr.strip(), run.stderr


def test_train_lecture_rejects_a_missing_data_file(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), "--data", str(tmp_path / "nope.txt")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "no such file" in run.stderr
