"""Which tests a run selects (tests/conftest.py): a plain local `python -m pytest` leaves out the slow
tier; CI, any `-m` and any named file or test run what was asked for. Run in process by pytester on a
file of one test per tier, under this suite's own conftest.py."""
from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py").read_text(encoding="utf-8")
TIERS = """
import pytest

@pytest.mark.slow
def test_slow():
    pass

def test_fast():
    pass
"""


@pytest.fixture
def run(pytester, monkeypatch):
    """run(*args) -> the names of the tests a run with `args` selects, with CI unset unless set after."""
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # the installed plugins play no part here
    pytester.makeconftest(CONFTEST)
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\ntestpaths = ["test_tiers.py"]\n'
                               'markers = ["slow: slow"]\n')
    pytester.makepyfile(test_tiers=TIERS)

    def selected(*args: str) -> tuple[list[str], str]:
        result = pytester.runpytest_inprocess("--collect-only", "-q", *args)
        return sorted(line.split("::")[-1] for line in result.outlines if "::" in line), result.stdout.str()
    return selected


def test_a_plain_local_run_leaves_out_the_slow_tier_and_says_so(run):
    names, out = run()
    assert names == ["test_fast"]
    assert "1/2 tests collected (1 deselected)" in out


def test_the_header_says_what_was_left_out(pytester, run):
    assert "slow tests left out" in pytester.runpytest_inprocess("--collect-only").stdout.str()


@pytest.mark.parametrize("args", [("-m", ""), ("test_tiers.py",), ("test_tiers.py::test_slow",)],
                         ids=["empty-m", "a-named-file", "a-named-test"])
def test_a_marker_or_a_named_file_or_test_runs_what_was_asked(run, args):
    assert "test_slow" in run(*args)[0]


def test_ci_runs_everything(run, monkeypatch):
    monkeypatch.setenv("CI", "true")
    assert run()[0] == ["test_fast", "test_slow"]
    assert run("test_tiers.py")[0] == ["test_fast", "test_slow"]


def test_minus_m_slow_runs_only_the_slow_tier(run):
    assert run("-m", "slow")[0] == ["test_slow"]
