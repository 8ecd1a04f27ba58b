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


def _family_texts() -> list[str]:
    """Every sentence of grader.vocabulary's feedback families, a function's with a placeholder per field."""
    from grader import vocabulary
    texts = []
    for family in (vocabulary.Transpose, vocabulary.Broadcast, vocabulary.Sign, vocabulary.Zeros, vocabulary.Chain):
        for value in vars(family).values():
            if isinstance(value, str):
                texts.append(value)
            elif isinstance(value, staticmethod):
                fields = value.__func__.__code__.co_argcount
                texts += [value.__func__(*["\0"] * fields), *([value.__func__(*["\0"] * (fields - 1), True)]
                                                               if fields > 1 else [])]
    texts += [text for _, _, text in vocabulary.factors({"n": 3, "m": 5}, {"n": "\0"})]
    return texts


def _literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each string a module writes outside its docstrings, an f-string's pieces each."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_each_feedback_family_is_worded_in_grader_vocabulary_alone():
    """Rewording a family (a transpose, a sum over a broadcast dimension, a scale factor, the sign, zeros, a
    step of the chain rule) touches one module: no other module of the judge or the rule table writes a
    piece of one of its sentences."""
    texts = _family_texts()
    # A whole sentence, or a long piece of one between its fields: phrases as short as " was broadcast over "
    # are the lecture's too (the reference answers' explanations say them).
    pieces = {piece.strip() for text in texts for piece in text.split("\0") if len(piece.strip()) >= 24}
    whole = {text for text in texts if "\0" not in text}
    copies = [f"{path.relative_to(ROOT)}:{line}: {literal!r}"
              for folder in ("grader/judge", "grader/derive") for path in sorted((ROOT / folder).glob("*.py"))
              for line, literal in _literals(path)
              if literal.strip() in whole or any(piece in literal for piece in pieces)]
    assert not copies, "worded outside grader.vocabulary:\n" + "\n".join(copies)
