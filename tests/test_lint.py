"""The code's own rules, held by the tests so that CI holds them: ruff (pyflakes, pycodestyle, sorted
imports, likely bugs; configured in pyproject.toml) over every folder of Python, and import-linter's
contracts (imports point one way down the layers, no cycle, the engine names no exercise), each contract
a test of its own so that a broken one names itself."""
from __future__ import annotations

import ast
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


def _grader_imports() -> dict[str, set[str]]:
    """Each grader module -> the grader modules it imports anywhere in its text: at the top, inside a
    function (a lazy import), under `if TYPE_CHECKING`, all alike."""
    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (ROOT / "grader").rglob("*.py") if "notebook" not in p.parent.name}  # not notebooks' sources
    edges = {}
    for module, path in files.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                assert not node.level, f"{path}: a relative import (grader imports by absolute name)"
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                          for a in node.names}
        edges[module] = {m for m in found if m in files and m != module}
    return edges


def test_no_import_circle_between_grader_modules_lazy_imports_included():
    """import-linter's no-cycles contract compares siblings; this walks every import of every module, so
    that a circle closed by an import inside a function, or through a package's __init__, shows too."""
    edges, state, circles = _grader_imports(), {}, []

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(edges[module]):
            if state.get(target) == "open":
                circles.append(" -> ".join([*path[path.index(target):], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert not circles, circles
