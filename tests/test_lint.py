"""The code's own rules, held by the tests so that CI holds them: ruff (pyflakes, pycodestyle, sorted
imports, likely bugs; configured in pyproject.toml) over every folder of Python, and import-linter's
contracts (imports point one way down the layers, no cycle, the engine names no exercise), each contract
a test of its own so that a broken one names itself."""
from __future__ import annotations

import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from helpers.paths import ROOT

LINTED = ("grader", "autotests", "solutions", "tests", "benchmarks", "student", "setup.py")
CONTRACTS = [c["id"] for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]]


@pytest.mark.parametrize("path", LINTED)
def test_ruff_finds_nothing(path):
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", path],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("contract", CONTRACTS)
def test_import_contract_is_kept(contract):
    lint_imports = Path(sysconfig.get_path("scripts")) / "lint-imports"
    done = subprocess.run([str(lint_imports), "--no-cache", "--contract", contract],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
