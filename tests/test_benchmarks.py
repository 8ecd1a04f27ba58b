"""benchmarks/train_lecture.py runs end to end on a tiny step count, for the notebook's network and for
variants (its numbers are in benchmarks/README.md). That every variant's reference manual_backward
follows autograd's SGD steps is proven without the script, by tests/test_variants.py."""
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


def train_lecture(cwd, *options: str) -> str:
    """The script's output for a 200-step run with tiny timing rounds, checked as the user reads it: the
    notebook's progress, train and val loss under `loss, ...`, 20 samples, both seconds per step, and
    both timed loops ending on the same batch loss (the manual backward followed autograd's steps)."""
    run = subprocess.run([sys.executable, str(SCRIPT), *options, "--steps", "200", "--timing-steps", "100",
                          "--timing-rounds", "1", "--warmup", "20"],
                         cwd=cwd, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    assert not run.stderr.strip(), run.stderr
    out = run.stdout
    assert "names.txt shipped with the package (default)" in out
    assert re.search(r"^  step +199/200: loss \d+\.\d{4}$", out, re.M)

    losses = section(out, "loss, ")
    assert [line.split()[0] for line in losses] == ["train", "val"]
    for line in losses:
        assert re.fullmatch(r"  (train|val) loss \d+\.\d{4}", line), line
        assert 1.5 < float(line.split()[-1]) < 3.5, line  # 200 steps: well below log(27) = 3.30 at best

    samples = section(out, "20 samples")
    assert len(samples) == 20
    assert all(re.fullmatch(r"  [a-z]*", s) for s in samples), samples

    timing = section(out, "seconds per step")
    last = {}
    for kind in ("manual backward", "autograd backward"):
        match = next(filter(None, (re.match(rf"  {kind} +\d+\.\d{{6}} s/step .*last batch loss (\d+\.\d+)\)$",
                                            line) for line in timing)), None)
        assert match, (kind, timing)
        last[kind] = match[1]
    assert last["manual backward"] == last["autograd backward"], timing
    assert any(re.fullmatch(r"  autograd / manual \d+\.\d\dx", line) for line in timing), timing
    return out


@pytest.mark.slow
def test_train_lecture_prints_losses_samples_and_seconds_per_step(tmp_path):
    # From another folder, on the default data: the script finds the notebook and the package itself.
    out = train_lecture(tmp_path)
    assert "\nloss, batch norm calibrated on the training set\n" in out
    assert "=== makemore-mlp/" not in out  # the notebook's own network, not a variant


@pytest.mark.slow
@pytest.mark.parametrize(("variant", "calibration"), [
    ("relu-layernorm", "loss, nothing to calibrate: layer norm's statistics are each example's own"),
    ("makemore-mlp/gelu-none-residual", "loss, nothing to calibrate: no normalization"),
    ("sigmoid-batchnorm", "loss, batch norm calibrated on the training set"),
])
def test_train_lecture_trains_a_variant(tmp_path, variant, calibration):
    """A variant goes through the same cells: its own network, init and reference manual_backward, batch
    norm's calibration only where it has batch norm."""
    out = train_lecture(tmp_path, "--variant", variant)
    name = variant.removeprefix("makemore-mlp/")
    assert re.search(rf"^=== makemore-mlp/{name}: \S", out, re.M), out[:500]
    assert f"\n{calibration}\n" in out


def test_train_lecture_rejects_an_unknown_variant(capsys, monkeypatch):
    """Its main() in this process, where torch and the variants are loaded already (the missing data file's
    test below runs the script as a user does): argparse's refusal, exit 2, and no traceback."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_lecture", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(sys, "path", list(sys.path))  # main() puts the checkout first, as the script needs,
    monkeypatch.setenv("MPLBACKEND", "Agg")  # and sets matplotlib's backend where none is set
    with pytest.raises(SystemExit) as exited:
        script.main(["--variant", "swish-batchnorm"])
    stderr = capsys.readouterr().err
    assert exited.value.code == 2
    assert "unknown variant 'swish-batchnorm'" in stderr and "relu-layernorm" in stderr
    assert "Traceback" not in stderr


def test_train_lecture_rejects_a_missing_data_file(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), "--data", str(tmp_path / "nope.txt")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "no such file" in run.stderr


SPEED = ROOT / "benchmarks" / "self_check_speed.py"


@pytest.mark.slow
def test_self_check_speed_times_the_check_cells_of_a_few_slips():
    """Two slips (exercise 1's first cell) in a kernel: the cold first check, the slowest others, then the
    median and the worst."""
    run = subprocess.run([sys.executable, str(SPEED), "--limit", "2", "--slowest", "1"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout
    assert out.startswith("makemore-mlp: 2 slips; kernel and Run All took "), out
    assert re.search(r"^first check cell \(builds the self-check's batches\): \d+\.\d\d s, dlogprobs \(", out, re.M)
    assert re.search(r"^slowest 1 of the other 1 check cells:\n +\d+\.\d\d s  dlogprobs \(", out, re.M), out
    assert re.search(r"^median \d+\.\d\d s, worst \d+\.\d\d s, total \d+ s$", out, re.M), out


@pytest.mark.slow
def test_self_check_speed_rejects_an_unknown_variant():
    run = subprocess.run([sys.executable, str(SPEED), "--variant", "swish-batchnorm"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "unknown variant 'swish-batchnorm'" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
