"""Nothing of a hidden configuration reaches anyone but as a verdict: cells that plant the hidden sizes and
values in every spelling they can (glued to letters, built by arithmetic, a repr, an exception's arguments,
a shape, a chosen difference, a count of wrong rows, a class or a type named after them, an exit status, a
value stashed on a hidden run for the public one to show) are graded through the real command (`grade
--html`, `report`, `export`), once as the course grades them and once with the static check switched off
(the red team's floor: `raise`, `import`, `type(...)` as written). Every file written and every line
printed is then searched for each planted text, as each hidden configuration would spell it (the hidden
configurations are the judge's own, drawn from the course's salt). And since a leak may take a spelling
no list foresees, the whole batch is graded again under another salt, that is on other hidden
configurations: every file and line must come out the same, times aside.

The batch is graded in an nbgrader course that `course init` made (`grade --gradebook`, then nbgrader's
`generate_feedback`), so the search covers what nbgrader keeps and shows too: every table of the gradebook
(grades, comments, scores), the autograded notebooks formgrader shows, and the feedback pages students get.
"""
from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from grader.judge.configs import generate
from grader.judge.exam import prepare
from helpers import nostatic
from helpers.cli import export_formats
from helpers.nbgrader_course import set_answers
from helpers.notebooks import reference_sources, write
from helpers.paths import COURSE, ROOT

pytestmark = pytest.mark.slow

HIDDEN = "n != 32"  # the lecture's batch size: true on every hidden configuration, false on the probe
REFERENCE = reference_sources()
FUNCTION = "ex4_backward"


def _planted(grade_id: str, plant: str, *, always: bool = False) -> str:
    """The reference answer, then `plant`, run on the hidden configurations only (or on every one)."""
    body = plant if always else f"if {HIDDEN}:\n" + "".join(f"    {line}\n" for line in plant.splitlines())
    return REFERENCE[grade_id] + "\n" + body + "\n"


# Cells the static check lets through: each plants through what the grader shows of a failure.
CHECKED = {
    # An error's message: glued to letters, built by arithmetic, a row of data, targets or a weight.
    "dlogprobs": _planted("dlogprobs", '{}[f"n{n}v{logits.shape[1]}h{hpreact.shape[1]}e{C.shape[1]}b{Xb.shape[1]}"]'),
    "dprobs": _planted("dprobs", "dprobs = dprobs.view(n * 1000 + 7)"),
    "dcounts_sum_inv": _planted("dcounts_sum_inv", "torch.zeros(3)[n * 1000 + 7]"),
    "dcounts_sum": _planted("dcounts_sum", 'int(f"q{n}x{logits.shape[1]}")'),
    "dcounts": _planted("dcounts", "{}[tuple(Xb[0].tolist())]"),
    "dnorm_logits": _planted("dnorm_logits", "{}[str(Yb[:6].tolist())]"),
    "dlogit_maxes": _planted("dlogit_maxes", "{}[W1[0, 0].item()]"),
    "dlogits": _planted("dlogits", "{}[str(W1[0, :3])]"),
    # A shape, a chosen difference, counts of wrong columns, rows and entries, a size too large to send.
    "dh": _planted("dh", "dh = torch.zeros(n * 1000 + 7, hpreact.shape[1])"),
    "dW2": _planted("dW2", "dW2 = dW2 + (n + 0.5) * 1000"),
    "db2": _planted("db2", "db2 = db2.clone()\ndb2[:(n % 7) + 1] += 1"),
    "dhpreact": _planted("dhpreact", "dhpreact = dhpreact.clone()\ndhpreact[:3] = float('nan')"),
    "dbngain": _planted("dbngain", "dbngain = torch.zeros(n * 100000 + 7)"),
    "dbnraw": _planted("dbnraw", "dbnraw = dbnraw.clone()\ndbnraw[0] += 1"),  # the honest slip
    "dbnvar_inv": _planted("dbnvar_inv", "dbnvar_inv = dbnvar_inv * (n + 0.25) * 1000"),
    "dbnvar": _planted("dbnvar", "dbnvar = dbnvar[:, :1] * 0 + n * 1000 + 7"),
    # Failing on the public configuration too: what is shown comes from there, and shows only it.
    "dW1": _planted("dW1", "dW1 = torch.zeros(n * 1000 + 7)", always=True),
    "db1": _planted("db1", '{}[f"n{n}v{logits.shape[1]}"]', always=True),
    # A function's answers and the training run on a hidden configuration.
    FUNCTION: REFERENCE[FUNCTION].replace(
        "    return {", '    if Yb.shape[0] != 32:\n        {}[f"n{Yb.shape[0]}v{logits.shape[1]}"]\n    return {'),
}
# The training run follows other steps than autograd's: its losses were once shown.
DIVERGING = {FUNCTION: REFERENCE[FUNCTION].replace("    dW2 = h.T @ dlogits\n", "    dW2 = 1.5 * h.T @ dlogits\n")}

# Cells only the floor runs: what the static check refuses, as written.
FLOOR = {
    "dlogprobs": _planted("dlogprobs", "raise KeyError(Xb[0].tolist(), Yb[:4].tolist(), W1[0, 0].item())"),
    "dprobs": _planted("dprobs", 'raise type(f"E{n}x{logits.shape[1]}", (Exception,), {})("boom")'),
    "dcounts_sum_inv": _planted("dcounts_sum_inv", "raise ValueError(n * 1000 + 7, logits.shape[1])"),
    # Stashed on the hidden runs, shown by the public one: the public run comes first, before any hidden value.
    "dcounts": REFERENCE["dcounts"] + '\nimport builtins\nstash = builtins.__dict__.setdefault("leak", [])\n'
                                      'stash.append(f"n{n}v{logits.shape[1]}")\nraise ValueError(str(stash))\n',
    "dnorm_logits": _planted("dnorm_logits", 'dnorm_logits = type(f"T{n}", (torch.Tensor,), {})()'),
    "dlogit_maxes": _planted("dlogit_maxes", 'dlogit_maxes = type(f"V{n}x{logits.shape[1]}", (), {})()'),
    "dlogits": _planted("dlogits", 'import os\nos.listdir(f"/n{n}v{logits.shape[1]}")'),
    "dh": _planted("dh", 'import sys\nsys.audit(f"n{n}v{logits.shape[1]}")'),
    FUNCTION: REFERENCE[FUNCTION].replace(
        "    return {", "    if Yb.shape[0] != 32:\n"
                      '        raise type(f"E{Yb.shape[0]}", (Exception,), {})(W1[0, 0].item())\n    return {'),
}
# A child that ends itself with a hidden size as its exit status.
EXITING = {"dlogprobs": _planted("dlogprobs", "import os\nos._exit(n)")}


def _texts(case, lecture: bool) -> set[str]:
    """What the cells above write on `case`, as they spell it."""
    s, v = case.config.sizes, case.values
    n, vocab = s.n, s.vocab
    w = v["W1"][0, 0].item()
    texts = {f"n{n}v{vocab}h{s.n_hidden}e{s.n_embd}b{s.block_size}", f"q{n}x{vocab}", f"n{n}v{vocab}",
             f"E{n}x{vocab}", f"V{n}x{vocab}", f"T{n}", f"E{n}", str(n * 1000 + 7), str(n * 100000 + 7),
             str(tuple(v["Xb"][0].tolist())), str(v["Xb"][0].tolist()), str(v["Yb"][:6].tolist()),
             str(v["Yb"][:4].tolist()), repr(w), f"{w:.4f}", f"{(n + 0.5) * 1000:.3g}", f"{(n + 0.25) * 1000:.4g}"}
    if lecture:  # short spellings a public configuration may well show for other reasons
        texts |= {str(n), str(vocab)}
    return texts


SALTS = (COURSE.secret_salt, "feedback leaks: another course, another term")
ROUTES = {"checked": ({"planted": CHECKED, "diverging": DIVERGING}, False),
          "floor": ({"planted": FLOOR, "exiting": EXITING}, True)}


def _nbgrader(args: list[str], cwd: Path, course: Path) -> str:
    """A command of the instructor's, with Jupyter's folders inside the course (out of the outputs compared)."""
    jupyter = {f"JUPYTER_{k}_DIR": str(course / ".jupyter" / k.lower()) for k in ("CONFIG", "DATA", "RUNTIME")}
    env = {**os.environ, **jupyter}
    done = subprocess.run([shutil.which(args[0]), *args[1:]], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=600)
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout + done.stderr


def _course(generated: Path, folder: Path, salt: str) -> Path:
    """The generated course (tests/conftest.py's `generated_course`), graded under `salt`."""
    shutil.copytree(generated, folder, symlinks=True)
    raw = {**yaml.safe_load((folder / "course.yml").read_text()), "secret_salt": salt}
    (folder / "course.yml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return folder / "course.yml"


def _released(course: Path, cells: dict[str, str]):
    """The course's released notebook (every cell nbgrader recorded) answered with `cells` and the reference."""
    nb = nbformat.read(course.parent / "release" / COURSE.assignment / COURSE.notebook, as_version=4)
    set_answers(nb, reference_sources(cells))
    return nb


def _nbgrader_texts(course: Path) -> dict[str, str]:
    """What nbgrader keeps and shows: every row of the gradebook, the autograded notebooks, the feedback."""
    with contextlib.closing(sqlite3.connect(course / "gradebook.db")) as db:
        rows = "\n".join(db.iterdump())
    # nbgrader's random ids and its times are no text a hidden configuration chose (and may spell a size by chance)
    found = {"nbgrader: gradebook.db": re.sub(r"\b[0-9a-f]{32}\b|\d{4}-\d\d-\d\d[ T][\d:.]+", "#", rows)}
    for place in ("autograded", "feedback"):
        for path in sorted((course / place).rglob("*.*")):
            if path.suffix in (".ipynb", ".html"):
                found[f"nbgrader: {path.relative_to(course)}"] = path.read_text(errors="replace")
    return found


def _run(args: list[str], *, floor: bool = False) -> str:
    command = [sys.executable, str(Path(nostatic.__file__)), "--"] if floor else \
        [sys.executable, "-c", "from grader.cli import main; main()"]
    done = subprocess.run([*command, *args], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def graded(tmp_path_factory, generated_course) -> dict[str, dict[str, str]]:
    """For each salt: every file the commands wrote and every line they printed, by name."""
    found = {}
    for salt in SALTS:
        root = tmp_path_factory.mktemp("leaks")
        course = _course(generated_course, root / "course", salt)
        printed = {}
        for route, (notebooks, floor) in ROUTES.items():
            for name, cells in notebooks.items():
                write(root / route / "submissions" / f"{route}-{name}" / COURSE.assignment / COURSE.notebook,
                      _released(course, cells))
            out = root / route / "results"
            printed[f"{route}: grade"] = _run(["grade", str(root / route / "submissions"), "--out", str(out),
                                               "--course", str(course), "--html", "--jobs", "1",
                                               "--gradebook", str(course.parent / "gradebook.db")], floor=floor)
            printed[f"{route}: report"] = _run(["report", str(out)])
            printed[f"{route}: report --json"] = _run(["report", str(out), "--json"])
            for fmt in export_formats():
                printed[f"{route}: export {fmt}"] = _run(["export", str(out), "--format", fmt, "--course", str(course)])
        files = {str(p.relative_to(root)): p.read_text(errors="replace") for p in root.rglob("*")
                 if p.is_file() and p.suffix != ".ipynb" and "course" not in p.relative_to(root).parts}
        printed["nbgrader: generate_feedback"] = _nbgrader(["nbgrader", "generate_feedback", COURSE.assignment],
                                                           course.parent, course.parent)
        nbgrader = _nbgrader_texts(course.parent)
        assert any("feedback" in name and "planted" in name for name in nbgrader), list(nbgrader)
        found[salt] = {name: text.replace(str(root), "<root>")
                       for name, text in {**files, **printed, **nbgrader}.items()}
    return found


def _readable(text: str) -> str:
    """The text a person or tool reads: embedded pictures are not text."""
    return re.sub(r"data:[\w/+.-]+;base64,[A-Za-z0-9+/=]+", "data:", text)


# What differs from run to run: times and rates (and the order of the slowest submissions), and digests of what a
# result depends on (its course file's path among it) or of the result itself, times included.
MEASURED = re.compile(r"execution_time|_ms_per_step|input_digest|seconds|times")


def _unmeasured(text: str) -> str:
    """`text` without what differs from run to run."""
    try:
        return json.dumps(_without_measures(json.loads(text)), indent=1, sort_keys=True)
    except ValueError:
        pass
    text = re.sub(r'<meta name="backprop-ninja-result" content="[^"]*">', "", text)
    text = re.sub(r"Slowest:.*?</table>", "Slowest: #", text, flags=re.S)
    lines = re.sub(r"\d+(\.\d+)?( s\b|s\b| seconds| per second)", "# s", text).split("\n")
    # `grade` says "ran X" as each submission finishes, from the thread that runs the next chunk while this
    # one is judged and tallied: those lines come in any order, and between any of the tallies
    ran = sorted(line for line in lines if line.startswith("ran "))
    return "\n".join([line for line in lines if not line.startswith("ran ")] + ran)


def _without_measures(value):
    if isinstance(value, dict):
        return {k: _without_measures(v) for k, v in value.items() if not MEASURED.search(k)}
    if isinstance(value, list):
        return [_without_measures(v) for v in value]
    return value


def test_the_planted_cells_lost_their_points(graded):
    """The cells did run as planted (a cell that silently passed would plant nothing)."""
    for outputs in graded.values():
        results = {name: json.loads(text) for name, text in outputs.items()
                   if name.endswith("backprop_ninja.json") and "planted" in name}
        assert len(results) == 2, list(outputs)
        for name, result in results.items():
            tests = {t["name"]: t for t in result["tests"]}
            planted = CHECKED if name.startswith("checked") else FLOOR
            for grade_id in planted:
                if grade_id != FUNCTION:
                    assert tests[grade_id]["score"] == 0, (name, grade_id, tests[grade_id]["output"])


@pytest.mark.parametrize("salt", SALTS)
def test_no_planted_text_reaches_any_output(graded, salt):
    cases = [prepare(c) for c in generate(COURSE.exercise_spec, salt, COURSE.configurations)]
    probe = next(c for c in cases if not c.config.scored)
    public = _texts(probe, lecture=True)
    planted = {text: case.config.name for case in cases if case.config.scored for text in _texts(case, lecture=False)}
    found = [(name, text, where) for name, content in graded[salt].items() for text, where in planted.items()
             if text not in public and text in _searched(content)]
    assert not found, found[:20]


def _searched(content: str) -> str:
    """What is searched for a planted text: the readable text without the grader's own measurements (times and
    digests, whose digits held a planted `9007` once by chance); a page's stamp is its result, searched in the
    result's own file."""
    content = re.sub(r'<meta name="backprop-ninja-result" content="[^"]*">', "", content)
    return _readable(re.sub(r'"[^"]*(?:' + MEASURED.pattern + r')[^"]*": *(?:"[^"]*"|[-+.\deE]+)', "", content))


def test_every_output_is_the_same_whatever_the_hidden_configurations(graded):
    """Graded under another salt, that is other hidden sizes, data and weights, the same submissions give
    byte for byte the same files and lines, times and input digests aside: nothing in them depends on
    a hidden configuration but the verdicts, which these cells earn on any."""
    first, second = (graded[salt] for salt in SALTS)
    assert sorted(first) == sorted(second)
    # nbgrader's own records hold times and random ids throughout: searched above, not compared
    differ = [name for name in first if not name.startswith("nbgrader: ")
              and _unmeasured(first[name]) != _unmeasured(second[name])]
    assert not differ, {name: list(difflib.unified_diff(
        _unmeasured(first[name]).splitlines(), _unmeasured(second[name]).splitlines(), lineterm="", n=0))[:12]
        for name in differ}
