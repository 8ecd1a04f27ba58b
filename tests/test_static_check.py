"""grader.static_check: answer cells are read, never run, before they reach the sandbox. Everything a
gradient does not need is refused with a reason and the offending line quoted; every correct answer
(the reference and the corpus of correct alternatives) passes.

The static check is the layer that makes the runtime autograd watch meaningful: code in the child can
undo anything the child did to itself (NOTES §4), so a way past this check is a way to full marks with
autograd. The tests marked xfail below are such ways, reported; each states what it should do.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grader import sandbox, static_check
from grader.configs import generate
from grader.course import load
from grader.exam import CHAIN, LOCAL, prepare
from grader.exercise import BY_GRADE_ID
from grader.static_check import Allow, check, screen
from solutions import reference

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = reference.cells()
ALTERNATIVES = yaml.safe_load((Path(__file__).with_name("corpus") / "correct_alternatives.yml").read_text())

# ---------------------------------------------------------------------------------------------
# What must pass


@pytest.mark.parametrize("grade_id", sorted(REFERENCE))
def test_every_reference_answer_passes(grade_id):
    assert check(REFERENCE[grade_id]) is None
    assert static_check.forged_output(REFERENCE[grade_id]) is None


def _alternative_cells():
    for i, entry in enumerate(ALTERNATIVES):
        cells = {entry["grade_id"]: entry["code"], **entry.get("with", {})}
        for grade_id, code in cells.items():
            yield pytest.param(code, id=f"{i:02d}-{grade_id}")


@pytest.mark.parametrize("source", list(_alternative_cells()))
def test_every_correct_alternative_passes(source):
    assert check(source) is None
    assert static_check.forged_output(source) is None


@pytest.mark.parametrize("source", [
    "with torch.no_grad():\n    dprobs = dlogprobs / probs\n",
    "import torch\nimport torch.nn.functional as F\nimport math\ndprobs = dlogprobs / probs\n",
    "from torch.nn import functional as F\ndprobs = dlogprobs / probs\n",
    "def helper(x):\n    return x * 2\ndprobs = helper(dlogprobs) / 2 / probs\n",
    "dprobs = sum([dlogprobs / probs]) * math.pi / math.pi\n",
    "scale = lambda t: t\ndprobs = scale(dlogprobs / probs)\n",
    "print(dlogprobs.shape, len(probs))\ndprobs = dlogprobs / probs\n",
])
def test_ordinary_python_passes(source):
    assert check(source) is None
    assert static_check.forged_output(source) is None


@pytest.mark.parametrize("source, line", [
    ("print('score: 47/47')\ndprobs = dlogprobs / probs\n", 1),
    ("dprobs = dlogprobs / probs\nprint(f'Max_Score {47}', sep='')\n", 2),
    ("def report():\n    print('All tests passed!')\nreport()\ndprobs = dlogprobs / probs\n", 2),
    ("print('{\"score\": 47.0, \"tests\": []}')\ndprobs = dlogprobs / probs\n", 1),
    ("print('dprobs: 1 point')\ndprobs = dlogprobs / probs\n", 1),
])
def test_printing_a_fake_grading_result_is_found_but_not_refused(source, line):
    """It gains nothing (only the sandbox's answers are compared), but an instructor should know."""
    assert check(source) is None
    found = static_check.forged_output(source)
    assert found is not None and found.line == line and "grading result" in str(found)


# ---------------------------------------------------------------------------------------------
# What must be refused: (source, line of the offending construct, a word of the reason)

REFUSED = {
    # imports other than torch / F / math
    "import-os": ("import os\nos._exit(0)\n", 1, "import"),
    "import-sys": ("dprobs = dlogprobs / probs\nimport sys\nsys.exit(0)\n", 2, "import"),
    "from-os": ("from os import system\n", 1, "import"),
    "import-numpy": ("import numpy as np\n", 1, "import"),
    "import-importlib": ("import importlib\nm = importlib.import_module('os')\n", 1, "import"),
    "import-autograd": ("import torch.autograd as ag\n", 1, "import"),
    "from-torch-autograd": ("from torch import autograd\n", 1, "import"),
    "import-torch-as": ("import torch as t\n", 1, "import"),
    "import-relative": ("from . import answers\n", 1, "import"),
    "import-pickle": ("import pickle\n", 1, "import"),
    "import-socket": ("import socket\ns = socket.socket()\n", 1, "import"),
    # dunder names and attributes
    "dunder-class": ("c = probs.__class__\n", 1, "__class__"),
    "dunder-builtins": ("b = __builtins__\n", 1, "__builtins__"),
    "dunder-import": ("os = __import__('os')\n", 1, "__import__"),
    "dunder-eq": ("e = torch.Tensor.__eq__\n", 1, "__eq__"),
    "dunder-dict": ("d = probs.__dict__\n", 1, "__dict__"),
    "dunder-subclasses": ("s = ().__class__.__base__.__subclasses__()\n", 1, "__"),
    # private attributes
    "torch-C": ("c = torch._C\n", 1, "_C"),
    "make-subclass": ("x = torch.Tensor._make_subclass(torch.Tensor, probs)\n", 1, "_make_subclass"),
    "private-version": ("v = probs._version\n", 1, "_version"),
    "make-dual-private": ("d = torch._make_dual\n", 1, "_make_dual"),
    # builtins that reach code, objects or files
    **{f"builtin-{name}": (f"x = 1\ny = {name}\n", 2, name) for name in (
        "exec", "eval", "compile", "open", "getattr", "setattr", "delattr", "globals", "locals", "vars",
        "type", "breakpoint", "dir", "input", "exit", "quit", "object", "super", "memoryview", "help")},
    "builtin-exec-call": ("exec('import os')\n", 1, "exec"),
    "builtin-open-call": ("text = open('/etc/hostname').read()\n", 1, "open"),
    "raise-systemexit": ("raise SystemExit(0)\n", 1, "SystemExit"),
    # autograd, every route
    "autograd-grad": ("g = torch.autograd.grad(probs.sum(), probs)\n", 1, "autograd"),
    "autograd-functional": ("f = torch.autograd.functional.vjp\n", 1, "autograd"),
    "autograd-forward-ad": ("d = torch.autograd.forward_ad.make_dual(probs, probs)\n", 1, "autograd"),
    "func-vjp": ("out, f = torch.func.vjp(torch.log, probs)\n", 1, "func"),
    "func-grad": ("g = torch.func.grad(torch.sum)(probs)\n", 1, "func"),
    "func-jvp": ("g = torch.func.jvp(torch.exp, (probs,), (probs,))\n", 1, "func"),
    "backward": ("loss = probs.sum()\nloss.backward()\n", 2, "backward"),
    "tensor-backward-unbound": ("torch.Tensor.backward(probs)\n", 1, "backward"),
    "grad-attribute": ("g = probs.grad\n", 1, "grad"),
    "requires-grad-method": ("p = probs.detach().requires_grad_()\n", 1, "requires_grad_"),
    "requires-grad-store": ("p = probs.clone()\np.requires_grad = True\n", 2, "requires_grad"),
    "retain-grad": ("probs.retain_grad()\n", 1, "retain_grad"),
    "register-hook": ("h = probs.register_hook(print)\n", 1, "register_hook"),
    "grad-fn": ("f = probs.grad_fn\n", 1, "grad_fn"),
    "enable-grad": ("e = torch.enable_grad()\n", 1, "enable_grad"),
    "set-grad-enabled": ("torch.set_grad_enabled(True)\n", 1, "set_grad_enabled"),
    "with-enable-grad": ("with torch.enable_grad():\n    pass\n", 1, "with"),
    # files and storage
    "torch-load": ("t = torch.load('answers.pt')\n", 1, "load"),
    "torch-save": ("torch.save(probs, 'probs.pt')\n", 1, "save"),
    "torch-from-file": ("t = torch.from_file('x.bin', size=3)\n", 1, "from_file"),
    "untyped-storage": ("s = probs.untyped_storage()\n", 1, "untyped_storage"),
    "numpy": ("a = probs.numpy()\n", 1, "numpy"),
    "data-ptr": ("p = probs.data_ptr()\n", 1, "data_ptr"),
    # aliasing or rebinding the modules
    "alias-torch": ("t = torch\n", 1, "torch"),
    "alias-F": ("f = F\n", 1, "F"),
    "alias-in-list": ("t = [torch][0]\n", 1, "torch"),
    "alias-default-arg": ("def g(m=torch):\n    return m\n", 1, "torch"),
    "rebind-torch": ("torch = None\n", 1, "torch"),
    "rebind-F": ("F = None\n", 1, "F"),
    "del-torch": ("del torch\n", 1, "torch"),
    "walrus-torch": ("x = (torch := 1)\n", 1, "torch"),
    # assigning attributes: the comparator and friends
    "patch-allclose": ("torch.allclose = lambda *a, **k: True\n", 1, "attribute"),
    "patch-equal": ("torch.equal = lambda *a, **k: True\n", 1, "attribute"),
    "patch-eq": ("torch.Tensor.__eq__ = lambda a, b: True\n", 1, "__eq__"),
    "patch-F": ("F.softmax = None\n", 1, "attribute"),
    "set-data": ("probs.data = dlogprobs\n", 1, "attribute"),
    "del-attribute": ("del torch.allclose\n", 1, "attribute"),
    # class definitions (a lying Tensor subclass), try/except, with, global
    "class": ("class Liar(torch.Tensor):\n    pass\n", 1, "class"),
    "liar-subclass": ("dprobs = dlogprobs / probs\nclass Liar(torch.Tensor):\n"
                      "    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
                      "        return True\n", 2, "class"),
    "try-except": ("try:\n    x = 1\nexcept BaseException:\n    pass\n", 1, "try"),
    "try-finally": ("try:\n    x = 1\nfinally:\n    pass\n", 1, "try"),
    "with-open": ("with open('x') as f:\n    pass\n", 1, "with"),
    "with-no-grad-as": ("with torch.no_grad() as g:\n    pass\n", 1, "with"),
    "global": ("def f():\n    global dprobs\n    dprobs = 1\n", 2, "global"),
    "async": ("async def f():\n    pass\n", 1, "async"),
    # frame introspection
    "generator-function": ("def g():\n    yield 1\n", 2, "generator"),
    "gi-frame": ("gen = (x for x in [1])\nf = gen.gi_frame.f_globals\n", 2, "gi_frame"),
    "f-back": ("def f(frame):\n    return frame.f_back\n", 2, "f_back"),
    "tb-frame": ("def f(tb):\n    return tb.tb_frame\n", 2, "tb_frame"),
    # string tricks
    "string-dunder": ("name = '__class__'\n", 1, "dunder"),
    "string-dunder-import": ("x = 1\nname = 'os' + '__import__'\n", 2, "dunder"),
    # a syntax error is refused, not crashed on
    "syntax-error": ("x = 1\ndprobs = (1.0 / probs\n", 2, "syntax"),
}


@pytest.mark.parametrize("source, line, word", list(REFUSED.values()), ids=list(REFUSED))
def test_refused_with_a_reason_and_the_offending_line(source, line, word):
    refusal = check(source)
    assert refusal is not None, f"not refused:\n{source}"
    assert refusal.line == line, str(refusal)
    offending = source.splitlines()[line - 1].strip()
    if word != "syntax":  # the parser may quote a syntax error from the line it gave up on
        assert refusal.code.strip() == offending, str(refusal)
    assert refusal.code.strip(), str(refusal)
    assert word.lower() in refusal.reason.lower() or word in refusal.code, str(refusal)
    text = str(refusal)
    assert text.startswith(f"line {refusal.line}: ") and refusal.reason in text and refusal.code.strip() in text


def test_the_check_never_runs_the_cell(tmp_path):
    marker = tmp_path / "ran"
    source = f"open({str(marker)!r}, 'w').write('x')\n"
    assert check(source) is not None
    assert not marker.exists()


def test_screen_splits_a_submission_into_runnable_and_refused_cells():
    cells = {**REFERENCE, "dprobs": "import os\nos._exit(0)\n", "dh": "dh = dlogits @ W2.T\nclass A:\n    pass\n"}
    runnable, refused = screen(cells, Allow())
    assert set(refused) == {"dprobs", "dh"}
    assert set(runnable) == set(cells) - {"dprobs", "dh"}
    assert all(runnable[g] == cells[g] for g in runnable)
    assert refused["dprobs"].line == 1 and "import os" in str(refused["dprobs"])
    assert refused["dh"].line == 2 and "class A" in str(refused["dh"])


# ---------------------------------------------------------------------------------------------
# Ways past the check that were found and closed: rebinding a builtin under its own name, climbing out
# of a torch submodule through its own `import torch`, aliasing a submodule, autograd through a keyword
# argument. The sneak-* submissions of test_adversarial show what each was worth end to end.

BYPASSES = {
    "rebind-open": "open = open\ntext = open('/etc/hostname').read()\n",
    "rebind-exec": "exec = exec\nexec('import os')\n",
    "rebind-getattr": "getattr = getattr\nc = getattr(probs, '_' + '_class' + '_' + '_')\n",
    "rebind-type": "type = type\nLiar = type('Liar', (torch.Tensor,), {})\n",
    "rebind-default-arg": "def f(eval=eval):\n    return eval('1')\n",
    "rebind-loop-target": "for compile in [compile]:\n    code = compile('1', 'x', 'eval')\n",
    "special-torch": "t = torch.special.torch\n",
    "special-torch-os": "os = torch.special.torch.serialization.os\nos.system('true')\n",
    "special-torch-sys": "m = torch.special.torch.serialization.sys.modules\n",
    "special-torch-vjp": "f = torch.special.torch.autograd.functional.vjp\n",
    "special-torch-func": "f = torch.special.torch.func.vjp\n",
    "special-torch-enable-grad": "e = torch.special.torch.enable_grad()\n",
    "special-alias": "s = torch.special\nt = s.torch\n",
    "requires-grad-kwarg-zeros": "x = torch.zeros(3, requires_grad=True)\n",
    "requires-grad-kwarg-tensor": "x = torch.tensor([1.0], requires_grad=True)\n",
    "requires-grad-kwarg-like": "x = torch.ones_like(probs, requires_grad=True)\n",
}


@pytest.mark.parametrize("source", [pytest.param(source, id=name) for name, source in BYPASSES.items()])
def test_no_way_past_the_check(source):
    assert check(source) is not None, f"passes the static check:\n{source}"


@pytest.mark.parametrize("source", [
    "x = Xb" + ".T" * 100_000 + "\n",
    "x = 1" + " + 1" * 100_000 + "\n",
    "x = " + "-" * 100_000 + "1\n",
], ids=["attribute-chain", "long-sum", "unary-chain"])
def test_a_pathological_cell_is_refused_not_crashed_on(source):
    refusal = check(source)
    assert refusal is not None and refusal.reason


# ---------------------------------------------------------------------------------------------
# The runtime layer behind the check: what passes it but touches autograd is still caught


def test_autograd_that_got_past_the_check_would_be_caught_at_run_time():
    cells = {
        **REFERENCE,
        # a leaf that requires grad, created through a keyword argument
        "dprobs": "scratch = torch.ones(1, requires_grad=True)\n" + REFERENCE["dprobs"],
        # the watched torch.func.vjp, reached through torch.special.torch
        "dbnvar_inv": "_, f = torch.special.torch.func.vjp(lambda v: bndiff * v, bnvar_inv)\n"
                      "dbnvar_inv = f(dbnraw)[0]\n",
    }
    for grade_id in ("dprobs", "dbnvar_inv"):
        assert check(cells[grade_id]) is not None  # both once got past the check: the run-time layer is the backstop
    case = next(c for c in (prepare(config) for config in generate("static-check-test", 4)) if c.config.scored)
    attempt = sandbox.run(cells, [case], sandbox.Limits(timeout=60, cell_timeout=10))
    assert attempt.error is None, attempt.error
    for grade_id in ("dprobs", "dbnvar_inv"):
        for check_name in (CHAIN, LOCAL):
            outcome = attempt.outcomes[(grade_id, check_name, case.config.name)]
            assert outcome.status == "autograd", (grade_id, check_name, outcome.status, outcome.detail)
            assert outcome.tensor is None
            evidence = "; ".join(outcome.detail["evidence"])
            assert evidence.strip()
    assert "requires grad" in "; ".join(attempt.outcomes[("dprobs", CHAIN, case.config.name)].detail["evidence"])
    assert "vjp" in "; ".join(attempt.outcomes[("dbnvar_inv", CHAIN, case.config.name)].detail["evidence"])
    # The cells around them ran normally.
    for grade_id in ("dlogprobs", "dcounts_sum_inv", "dbnvar"):
        assert attempt.outcomes[(grade_id, CHAIN, case.config.name)].status == "tensor"


# ---------------------------------------------------------------------------------------------
# course.yml `allow` extends the allowlist


def test_the_course_allow_list_admits_a_name_that_was_refused(tmp_path):
    raw = yaml.safe_load((ROOT / "course.yml").read_text())
    raw["allow"] = {"torch": ["histc"], "functional": ["gelu"], "builtins": ["ord"]}
    path = tmp_path / "course.yml"
    path.write_text(yaml.safe_dump(raw))
    course = load(path)
    assert course.allow.torch == ("histc",) and course.allow.functional == ("gelu",) and course.allow.builtins == ("ord",)
    extended = Allow().extended(course.allow.torch, course.allow.functional, course.allow.builtins)
    for source in ("h = torch.histc(probs, bins=4)\n", "g = F.gelu(hpreact)\n", "k = ord('a')\n"):
        assert check(source) is not None, source
        assert check(source, extended) is None, source
    # Extending adds exactly those names: the rest of the allowlist still refuses.
    assert check("h = torch.histogram(probs, bins=4)\n", extended) is not None
    assert check("x = chr(97)\n", extended) is not None
    assert check(REFUSED["autograd-grad"][0], extended) is not None
    # And the default allowlist object is untouched.
    assert "histc" not in static_check.Allow().torch


def test_extended_allows_names_by_keyword_as_in_the_brief():
    allow = Allow().extended(torch=["histc"])
    assert check("h = torch.histc(probs)\n") is not None
    assert check("h = torch.histc(probs)\n", allow) is None
    assert allow.functional == Allow().functional and allow.builtins == Allow().builtins


def test_every_exercise_grade_id_has_a_reference_cell_that_passes():
    # Sanity for the parametrisations above: the reference covers every answer cell.
    assert {BY_GRADE_ID[g].cell_id for g in BY_GRADE_ID} == set(REFERENCE)

def test_a_right_answer_that_prints_a_fake_score_keeps_its_credit_and_is_flagged(tmp_path):
    from grader.grade import grade
    from notebooks import submission, write

    course = load(ROOT / "course.yml")
    forged = {"dprobs": "print('score: 51/51')\n" + REFERENCE["dprobs"]}
    write(tmp_path / "in" / "s.ipynb", submission(replace=forged))
    [(_, result)] = grade([tmp_path / "in"], course, tmp_path / "out", jobs=1)
    assert result.score == result.max_score
    assert [(f["kind"], f["cell"]) for f in result.flags] == [("forged-output", "dprobs")]
    assert "line 1" in result.flags[0]["evidence"] and "51/51" in result.flags[0]["evidence"]
