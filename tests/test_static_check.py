"""grader.sandbox.static_check: answer cells are read, never run, before they reach the sandbox. Everything a
gradient does not need is refused with a reason and the offending line quoted; every correct answer
(the reference and the corpus of correct alternatives) passes.

The check is an allowlist all the way down (node types, attributes, keywords, builtins, torch and F
names), so the tests below pin both sides: ordinary Python a gradient is written in passes, and every
way past the check a red team found (match class patterns, str.format fields, **kwargs, decorators,
aliases and rebinding of modules and builtins, ...) is refused. tests/test_static_fuzz.py runs what the
check accepts under witnesses of its own.
"""
from __future__ import annotations

import math
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from grader.course import load
from grader.exercises.makemore_mlp import EXERCISE
from grader.judge.exam import CHAIN, LOCAL
from grader.sandbox import parent as sandbox
from grader.sandbox import static_check
from grader.sandbox.static_check import Allow, check, screen
from helpers.cases import first_scored
from helpers.paths import ROOT
from solutions import reference

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
    # an instructor trial's exact GELU, and its kin: elementwise math whose twin (erf, tanh, exp) was allowed
    "phi = 0.5 * torch.erfc(-probs / 2 ** 0.5)\ndprobs = dlogprobs / probs + 0 * (phi + probs.erf() + probs.erfc() "
    "+ torch.expm1(probs).atanh().asinh() + torch.atanh(probs) * torch.asinh(probs))\n",
    "from torch.nn import functional as F\ndprobs = dlogprobs / probs\n",
    "def helper(x):\n    return x * 2\ndprobs = helper(dlogprobs) / 2 / probs\n",
    "dprobs = sum([dlogprobs / probs]) * math.pi / math.pi\n",
    "scale = lambda t: t\ndprobs = scale(dlogprobs / probs)\n",
    "print(dlogprobs.shape, len(probs))\ndprobs = dlogprobs / probs\n",
    "display(dlogprobs.shape)\ndprobs = dlogprobs / probs\n",
    # keys by keyword, as dict(...) names them: an instructor trial's right function ended so
    "grads = {}\ngrads.update(Wx=probs, bias=probs)\n",  # Jupyter's print, a builtin in a student's kernel
    # f-strings for printing
    "print(f'{dlogprobs.shape} {probs.sum().item():.4f} {n!r}')\n",
    # the shapes of Python a gradient is written in
    "_, idx = logits.max(1)\nassert idx.shape == (n,), 'one index per row'\ndel idx\n",
    "def scaled(x: torch.Tensor, k=2.0) -> torch.Tensor:\n    return x * k\ndprobs = scaled(dlogprobs, 1.0) / probs\n",
    "i = 0\nwhile i < 3:\n    i += 1\n    if i == 2:\n        break\nelse:\n    pass\n",
    "for i, (a, b) in enumerate(zip([1, 2], [3, 4])):\n    if a > b:\n        continue\n",
    "rows = [r.sum() for r in probs if r.numel()]\ncols = {j: c for j, c in enumerate(probs.T)}\n"
    "total = sum(x * x for x in rows)\nseen = {1, 2}\nlast = [y := probs.mean() for _ in range(2)]\n",
    "shape = (n, -1)\nx = probs.view(*shape)[..., 0]\n",
    "grads = dict(C=probs, W1=probs)\nmore = {**grads, 'b1': probs}\nkeys = sorted(more, key=len, reverse=True)\n",
    "x = F.linear(probs, torch.eye(probs.shape[1]))\ny = torch.addcmul(probs, probs, probs, value=2)\n"
    "z = torch.ger(probs[0], probs[1]) + torch.outer(probs[0], probs[1])\n",
    "dC = torch.zeros_like(probs)\ndC.index_add_(0, Yb, probs, alpha=1.0)\nm = probs.max(dim=1, keepdim=True).values\n",
    "s = probs.sum(axis=0, keepdims=True).type(torch.float64)\n",
    # an allowed builtin's name is a name like any other (its calls' keywords are checked all the same)
    "max = logits.max(1).values\nsum = max.sum()\ndef f(x, min=0):\n    return x.clamp(min=min)\n",
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
    "numpy-written": ("probs.numpy()[0] = 1\n", 1, "numpy"),
    # an instructor trial's student, at home in numpy
    "numpy-round-trip": ("dW2 = torch.from_numpy(ha.detach().numpy().T @ dza.numpy())\n", 1, "from_numpy"),
    "from-numpy-written": ("torch.from_numpy(a)[0] = 1\n", 1, "from_numpy"),
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
    # a match class pattern reads any attribute by name, dunders included
    "match-class-dunder": ("match probs:\n    case object(__class__=c):\n        pass\n", 1, "match"),
    "match-class-grad": ("dprobs = dlogprobs / probs\nmatch probs:\n    case torch.Tensor(grad=g):\n"
                         "        dprobs = g\n", 2, "match"),
    "match-mapping": ("match {}:\n    case {'x': x}:\n        pass\n", 1, "match"),
    # str.format's field names read attributes and items; f-strings read what they spell out
    "format-dunder-field": ("s = '{0.__class__}'.format(probs)\n", 1, "format"),
    "format-attribute-field": ("s = '{0.grad}'.format(probs)\n", 1, "format"),
    "format-item-field": ("s = '{0[x]}'.format({'x': 1})\n", 1, "format"),
    "format-nested-spec": ("s = '{0:{1.grad}}'.format(1, probs)\n", 1, "format"),
    "format-on-a-variable": ("t = '{0.grad}'\ns = t.format(probs)\n", 2, "format"),
    "format-map": ("s = '{x}'.format_map({'x': 1})\n", 1, "format_map"),
    "format-plain-template": ("print('{:.4f}'.format(1.0))\n", 1, "f-string"),
    "format-builtin": ("s = format(probs, '')\n", 1, "format"),
    "fstring-attribute": ("s = f'{probs.grad!r}'\n", 1, "grad"),
    "fstring-dunder": ("s = f'{probs.__class__}'\n", 1, "__class__"),
    "fstring-spec-field": ("w = 3\ns = f'{n:{w}}'\n", 2, "format spec"),
    # keyword unpacking and keyword names
    "kwargs-unpacking": ("x = torch.zeros(3, **{'requires_grad': True})\n", 1, "**"),
    "kwargs-unpacking-name": ("kw = dict(requires_grad=True)\nx = torch.ones(2, **kw)\n", 2, "**"),
    "kwargs-file": ("print(probs, file=None)\n", 1, "file"),
    "kwargs-pin-memory": ("x = torch.zeros(3, pin_memory=False)\n", 1, "pin_memory"),
    "kwargs-own-function": ("def f(x, scale):\n    return x * scale\ny = f(probs, scale=2)\n", 3, "by position"),
    # decorators, walrus, lambdas, defaults
    "decorator": ("@torch.no_grad()\ndef f(x):\n    return x\n", 1, "decorator"),
    "decorator-print": ("@print\ndef f():\n    pass\n", 1, "decorator"),
    "walrus-exec": ("y = (exec := print)\n", 1, "exec"),
    "walrus-in-comprehension": ("ys = [(F := x) for x in [1]]\n", 1, "F"),
    "lambda-default-exec": ("f = lambda e=exec: e('1')\n", 1, "exec"),
    "lambda-default-torch": ("f = lambda t=torch: t.autograd\n", 1, "torch"),
    "lambda-yield": ("f = lambda: (yield)\n", 1, "yield"),
    "param-named-torch": ("def f(torch):\n    return torch.autograd\n", 1, "torch"),
    "param-named-builtin": ("def f(getattr):\n    return getattr\n", 1, "getattr"),
    "def-named-builtin": ("def open(x):\n    pass\n", 1, "open"),
    "rebind-dict": ("dict = torch.zeros\n", 1, "dict"),
    "param-named-dict": ("def f(dict):\n    return dict(requires_grad=True)\n", 1, "dict"),
    "annotation-autograd": ("def f(x: torch.autograd.Function):\n    return x\n", 1, "autograd"),
    "return-annotation": ("def f() -> torch.func:\n    pass\n", 1, "func"),
    "annassign": ("dprobs: torch.Tensor = dlogprobs / probs\n", 1, "annotated"),
    # builtins that reach objects and their types
    "type-call": ("t = type(probs)\n", 1, "type"),
    "vars-call": ("v = vars(torch.Tensor)\n", 1, "vars"),
    "dir-call": ("d = dir(probs)\n", 1, "dir"),
    "iter-next": ("i = iter([1])\n", 1, "iter"),
    # what leaves inference mode, and modules whose members were never listed
    "inference-mode-off": ("with torch.inference_mode(False):\n    pass\n", 1, "with"),
    "inference-mode-call": ("m = torch.inference_mode(False)\n", 1, "inference_mode"),
    "linalg-torch": ("t = torch.linalg.torch\n", 1, "linalg"),
    "functional-torch": ("t = F.torch\n", 1, "F.torch"),
    "functional-module-alias": ("f = torch.nn.functional\n", 1, "torch.nn.functional"),
    "nn-module": ("lin = torch.nn.Linear(2, 2)\n", 1, "torch.nn"),
    "math-alias": ("import math as m\n", 1, "import"),
    "math-dunder": ("import math\nl = math.__loader__\n", 2, "__loader__"),
    "star-import": ("from torch.nn.functional import *\n", 1, "import"),
    # tensor attributes outside the math
    "apply": ("probs.apply_(print)\n", 1, "apply_"),
    "as-subclass": ("x = probs.as_subclass(torch.Tensor)\n", 1, "as_subclass"),
    "unbound-hook": ("h = torch.Tensor.register_hook\n", 1, "register_hook"),
    "shape-class": ("c = probs.shape.__class__\n", 1, "__class__"),
    "gi-code": ("g = (x for x in [1])\nc = g.gi_code\n", 2, "gi_code"),
    # statements a gradient never needs
    "raise": ("raise ValueError('x')\n", 1, "raise"),
    "nonlocal": ("def f():\n    x = 1\n    def g():\n        nonlocal x\n", 4, "nonlocal"),
    "del-item": ("d = {'a': 1}\ndel d['a']\n", 2, "del"),
    "bytes": ("b = b'abc'\n", 1, "bytes"),
    # a red team's complex-step derivative of the forward line: exact, and no calculus in it
    "complex-step": ("P = (hprebn + 0j).clone()\nP[0, 0] += 1e-30j\n", 1, "complex"),
    "await-in-async-comprehension": ("async def f():\n    return [x async for x in g()]\n", 1, "async"),
    "assert-grad": ("assert probs.grad is None, probs.grad_fn\n", 1, "grad"),
    # a syntax error is refused, not crashed on
    "syntax-error": ("x = 1\ndprobs = (1.0 / probs\n", 2, "syntax"),
    # Jupyter runs these through IPython, the grader runs Python: said as what they are (a student trial's %%time
    # was "syntax error")
    "cell-magic": ("%%time\ndh = dlogits @ W2.T\n", 1, "IPython magic"),
    "shell": ("!nvidia-smi\ndh = dlogits @ W2.T\n", 1, "shell command"),
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


# What of REFUSED an honest student writes: an error to fix, not an integrity flag (tests/test_flags.py); every
# other refusal here, and every bypass, is flagged.
HONEST = {"import-numpy", "try-finally", "global", "kwargs-own-function", "annassign", "iter-next", "nn-module",
          "math-alias", "star-import", "nonlocal", "del-item", "raise", "numpy", "numpy-round-trip"}


def test_only_what_an_honest_student_writes_is_refused_as_honest():
    assert {name for name, (source, _, _) in REFUSED.items() if check(source).honest} == HONEST
    assert [name for name, source in BYPASSES.items() if check(source).honest] == []


def test_the_check_never_runs_the_cell(tmp_path):
    marker = tmp_path / "ran"
    source = f"open({str(marker)!r}, 'w').write('x')\n"
    assert check(source) is not None
    assert not marker.exists()


def test_screen_splits_a_submission_into_runnable_and_refused_cells():
    cells = {**REFERENCE, "dprobs": "import os\nos._exit(0)\n", "dh": "dh = dlogits @ W2.T\nclass A:\n    pass\n"}
    screened = screen(cells, Allow())
    runnable, refused = screened.runnable, screened.refused
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
# The allowlists themselves


def test_the_docstring_names_exactly_the_accepted_node_types():
    """The module docstring is where a reviewer reads what a cell may hold: it must be the code's list."""
    section = static_check.__doc__.split("Accepted node types")[1].split("\n\nRefused")[0]
    headings = re.findall(r"^- ([^:]*):", section, re.MULTILINE)
    named = {word for heading in headings for word in re.findall(r"[A-Za-z]+", heading)} - {"and", "their", "operators"}
    assert named == {kind.__name__ for kind in static_check.ACCEPTED}


@pytest.mark.parametrize("module, names", [(torch, static_check.TORCH), (F, static_check.FUNCTIONAL),
                                           (math, static_check.MATH)], ids=["torch", "F", "math"])
def test_every_allowed_module_name_exists_and_is_not_a_module(module, names):
    """A module among them would turn the attribute after it into a name no allowlist judged."""
    for name in names:
        assert not isinstance(getattr(module, name), types.ModuleType), name


def _reachable_values():
    """A value of every kind an accepted cell can hold: tensors and what their math returns, Python's
    data types, functions and generators of its own, the allowed modules' members."""
    t = torch.ones(2, 3)

    def function(x):
        return x

    return [t, t.shape, t.dtype, t.device, t.max(1), {"a": 1}, [1], (1,), {1}, "s", 1, 1.5, 1j, True, None, ...,
            range(2), slice(1), function, lambda: 0, (x for x in []), zip(), enumerate([]), map(abs, []),
            filter(None, []), reversed([]), torch.Tensor, torch.Size, torch.float64, torch.sum, F.softmax, math,
            torch.no_grad(), torch.zeros(2, dtype=torch.long)]


@pytest.mark.filterwarnings("ignore:The use of `x.T`")
def test_no_allowed_attribute_leads_to_a_module_a_type_a_frame_or_code():
    """Every allowed attribute name, asked of every kind of value a cell can hold, gives data or a
    function; and each is an attribute of some such value (no name is on the list for nothing)."""
    unused = set(static_check.ATTRIBUTES)
    for value in _reachable_values():
        for name in static_check.ATTRIBUTES:
            try:
                found = getattr(value, name)
            except Exception:  # e.g. .T of a 1-d tensor, .item() of several values
                continue
            unused.discard(name)
            assert not isinstance(found, (types.ModuleType, type, types.FrameType, types.CodeType,
                                          types.TracebackType)), (value, name, found)
    assert not unused


def test_no_name_that_leaves_inference_mode_or_reaches_autograd_is_allowed():
    everything = static_check.TORCH | static_check.ATTRIBUTES | static_check.KEYWORDS | static_check.BUILTINS
    for name in ("inference_mode", "enable_grad", "set_grad_enabled", "autograd", "func", "backward", "grad",
                 "requires_grad", "requires_grad_", "grad_fn", "register_hook", "retain_grad", "data", "detach_",
                 "format", "format_map", "pin_memory", "file", "as_subclass", "apply_", "numpy", "storage"):
        assert name not in everything, name
    for name in ("getattr", "type", "vars", "dir", "globals", "locals", "eval", "exec", "compile", "open", "iter"):
        assert name not in static_check.BUILTINS, name


def test_the_check_is_the_same_in_a_jupyter_kernel_and_in_the_grader():
    """A student trial: a kernel's builtins hold IPython's `display` and `get_ipython` while a cell runs, the
    grader's do not, so the self-check (imported in the kernel) refused `display(dW2.shape)` as a builtin where
    the grader let it through to a NameError."""
    script = ("import builtins, sys\n"
              "if sys.argv[1] == 'kernel':\n"
              "    builtins.display, builtins.get_ipython = print, lambda: None\n"
              "from grader.sandbox.static_check import check\n"
              "for cell in ('display(dW2.shape)\\ndW2 = h.T @ dlogits\\n', 'get_ipython()\\n'):\n"
              "    print(check(cell))\n")
    said = {where: subprocess.run([sys.executable, "-c", script, where], capture_output=True, text=True,
                                  check=True, cwd=ROOT).stdout for where in ("kernel", "grader")}
    assert said["kernel"] == said["grader"]
    display, magic = said["grader"].splitlines()
    assert display == "None"
    assert "builtin name get_ipython is not allowed" in magic


def test_display_in_an_answer_cell_prints_as_in_the_students_kernel():
    case = first_scored("static-check-test")
    cells = {**REFERENCE, "dW2": REFERENCE["dW2"] + "display(dW2.shape, dW2[0, :2])\n"}
    attempt = sandbox.run(cells, [case], sandbox.Limits(timeout=60, cell_timeout=10))
    assert attempt.error is None, attempt.error
    assert attempt.outcomes[("dW2", CHAIN, case.config.name)].status == "tensor"


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
    case = first_scored("static-check-test")
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
    raw["allow"] = {"torch": ["histc"], "functional": ["elu"], "builtins": ["ord"]}
    path = tmp_path / "course.yml"
    path.write_text(yaml.safe_dump(raw))
    course = load(path)
    assert course.allow.torch == ("histc",) and course.allow.functional == ("elu",)
    assert course.allow.builtins == ("ord",)
    extended = Allow().extended(course.allow.torch, course.allow.functional, course.allow.builtins)
    for source in ("h = torch.histc(probs, bins=4)\n", "g = F.elu(hpreact)\n", "k = ord('a')\n"):
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
    assert {EXERCISE.by_grade_id[g].cell_id for g in EXERCISE.by_grade_id} == set(REFERENCE)

def test_a_right_answer_that_prints_a_fake_score_keeps_its_credit_and_is_flagged(tmp_path):
    from grader.pipeline.batch import grade
    from helpers.notebooks import submission, write

    course = load(ROOT / "course.yml")
    forged = {"dprobs": "print('score: 51/51')\n" + REFERENCE["dprobs"]}
    write(tmp_path / "in" / "s.ipynb", submission(replace=forged))
    [(_, result)] = grade([tmp_path / "in"], course, tmp_path / "out", jobs=1)
    assert result.score == result.max_score
    assert [(f["kind"], f["cell"]) for f in result.flags] == [("forged-output", "dprobs")]
    assert "line 1" in result.flags[0]["evidence"] and "51/51" in result.flags[0]["evidence"]


@pytest.mark.parametrize("source", ["dembcat = dhprebn @ torch.linalg.pinv(W1)", "dembcat = dhprebn @ W1.inverse()",
                                    "dW1 = torch.linalg.solve(embcat, dhprebn)"])
def test_a_matrix_inverse_is_refused_with_the_transpose_it_stands_for(source):
    """A blind answer set's `dhprebn @ torch.linalg.pinv(W1)` was refused as outside the allowlist alone,
    which reads as "find another way to invert": the refusal says no gradient needs an inverse, and what does."""
    refusal = check(source)
    assert refusal is not None and "no gradient here needs an inverse" in refusal.reason, refusal
    assert "dx = dout @ W.T" in refusal.reason
    assert "needs an inverse" not in str(check("n = torch.linalg.norm(W1)"))


@pytest.mark.parametrize("code, instead", [("y = torch.special.expit(s)", "torch.sigmoid"),
                                           ("y = torch.linalg.vector_norm(u, dim=1, keepdim=True)", "x.norm(dim=")])
def test_a_refused_spelling_of_allowed_math_says_the_spelling_to_write(code, instead):
    """An instructor trial's right answers scored 0 with "is not tensor math this exercise allows" alone."""
    refused = static_check.check(code)
    assert refused is not None and "is not tensor math this exercise allows: write " + instead in refused.reason, \
        refused


def test_every_spelling_a_refusal_suggests_is_allowed():
    for allowed in static_check.SPELT_OTHERWISE.values():
        call = allowed.replace("x.norm(dim=..., keepdim=...)", "x.norm(dim=1, keepdim=True)")
        code = f"y = {call}" + ("" if call.endswith(")") else "(x, 1)")
        assert static_check.check(code) is None, code
