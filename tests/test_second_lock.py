"""The sandbox's second lock, alone: cells the static check would refuse are handed straight to
grader.sandbox.parent.run (no static check on the way), and each must gain nothing and be reported, from the
child's audit hook or its autograd signals, to the parent; a correct cell is reported for nothing.

Also here: a cell that timed out is not run again in that submission, and error text from a hidden
configuration shows no hidden size.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from grader import extract
from grader.exercises.makemore_mlp import EXERCISE
from grader.judge import suite
from grader.judge.compare import compare
from grader.judge.configs import generate
from grader.judge.exam import CHAIN, LOCAL, checks, prepare, prepare_training
from grader.sandbox import parent as sandbox
from helpers.notebooks import reference_sources
from helpers.paths import COURSE, ROOT

EX4 = EXERCISE.functions[0]

REFERENCE = reference_sources()
EX4_IDS = [a.grade_id for a in EXERCISE.answers if a.cell_id == EX4.cell]

# cell -> (attack, what the evidence must name). Each attack computes the right answer where it can.
ATTACKS = {
    "dprobs": ("p = probs.clone()\np.requires_grad_(**{'requires_grad': True})\n"
               "dprobs = torch.autograd.grad((p.log() * dlogprobs).sum(), p)[0]\n", "requires_grad_"),
    "dcounts_sum_inv": ("with torch.enable_grad():\n    c = counts_sum_inv.clone()\n    c.requires_grad = True\n"
                        "    dcounts_sum_inv, = torch.autograd.grad((counts * c * dprobs).sum(), c)\n",
                        "switched grad recording on"),
    # functorch through a module path no wrapper sits on: it ends in torch.autograd.grad
    "dcounts_sum": ("_, pullback = torch._functorch.eager_transforms.vjp(lambda s: s**-1, counts_sum)\n"
                    "dcounts_sum = pullback(dcounts_sum_inv)[0]\n", "switched grad recording on"),
    "dnorm_logits": ("with torch.inference_mode(False):\n    x = norm_logits.clone().requires_grad_()\n"
                     "    x.exp().backward(dcounts)\n    g = x.grad\n"
                     "dnorm_logits = g.clone()\n", "left inference mode"),
    "dlogit_maxes": ("exec('dlogit_maxes = (-dnorm_logits).sum(1, keepdim=True)')\n", "exec"),
    "dlogits": ("salt = open('/etc/hostname').read()\n" + REFERENCE["dlogits"], "open('/etc/hostname')"),
    "dh": ("import os\nme = os.getpid()\nfrom torch import autograd\n" + REFERENCE["dh"], "import('os')"),
    "dbndiff2": ("from torch import autograd\n" + REFERENCE["dbndiff2"], "import('torch')"),
    "dW2": ("import ctypes\nlibc = ctypes.CDLL(None)\n" + REFERENCE["dW2"], "ctypes.dlopen"),
    "db2": ("frame = torch.special.torch.serialization.sys._getframe()\n" + REFERENCE["db2"], "sys._getframe"),
    "dhpreact": ("objects = torch.special.torch.serialization.sys.modules['gc'].get_objects()\n"
                 + REFERENCE["dhpreact"], "gc.get_objects"),
    # the wrapped autograd.grad's original, from its code's constants
    "dbngain": ("original = torch.autograd.grad.__code__.co_consts\n" + REFERENCE["dbngain"], "object.__getattr__"),
    "dbnbias": ("signals = torch.special.torch.serialization.sys.modules['signal']\n"
                "signals.signal(signals.SIGUSR1, lambda number, frame: frame)\n" + REFERENCE["dbnbias"],
                "signal.signal"),
    "dbnraw": ("threads = torch.special.torch.serialization.sys.modules['threading']\n"
               "threads.Thread(target=lambda: None).start()\n" + REFERENCE["dbnraw"], "_thread.start_new_thread"),
    "dbnvar_inv": ("os = torch.special.torch.serialization.os\nos.kill(os.getpid(), 0)\n" + REFERENCE["dbnvar_inv"],
                   "os.kill"),
    "dbndiff": ("runner = torch.special.torch.serialization.sys.modules['subprocess']\n"
                "try:\n    runner.run(['true'])\nexcept OSError:\n    pass\n" + REFERENCE["dbndiff"],
                "subprocess.Popen"),
    "dbnvar": ("socket = torch.special.torch.serialization.sys.modules['socket']\n"
               "s = socket.socket()\ns.close()\n" + REFERENCE["dbnvar"], "socket.__new__"),
    EX4.cell: (REFERENCE[EX4.cell].replace("def manual_backward(params, cache, Yb):",
                                           "def manual_backward(params, cache, Yb):\n"
                                           "    torch.autograd.backward([])", 1),
               "torch.autograd.backward"),
}


@pytest.fixture(scope="module")
def cases():
    configs = generate("makemore-mlp", "second-lock-salt", 2)
    return [prepare(c) for c in configs]


@pytest.fixture(scope="module")
def training(cases):
    return prepare_training(cases[0].config, 3, 0.1)


@pytest.fixture(scope="module")
def attacked(cases, training):
    cells = {**REFERENCE, **{cell: source for cell, (source, _) in ATTACKS.items()}}
    return sandbox.run(cells, cases, sandbox.Limits(timeout=60, cell_timeout=10), training)


def _ids(cell: str) -> list[str]:
    return [*EX4_IDS, EXERCISE.training.grade_id] if cell == EX4.cell else [cell]


def _keys(cases, training, grade_id):
    if grade_id == EXERCISE.training.grade_id:
        return [(EXERCISE.training.grade_id, CHAIN, training.config.name)]
    return [(grade_id, check, case.config.name) for case in cases for check in checks(EXERCISE.by_grade_id[grade_id])]


@pytest.mark.parametrize("cell", list(ATTACKS))
def test_an_attack_past_the_static_check_gains_nothing_and_is_reported(attacked, cases, training, cell):
    _, named = ATTACKS[cell]
    assert attacked.error is None, attacked.error
    for grade_id in _ids(cell):
        for key in _keys(cases, training, grade_id):
            outcome = attacked.outcomes[key]
            assert outcome.status in ("autograd", "forbidden-call"), (key, outcome)
            assert outcome.tensor is None
            assert any(named in text for text in outcome.detail["evidence"]), (key, outcome.detail)


def test_a_cell_that_only_uses_autograd_is_an_autograd_outcome(attacked, cases):
    for case in cases:
        assert attacked.outcomes[("dprobs", CHAIN, case.config.name)].status == "autograd"
        assert attacked.outcomes[("dbngain", CHAIN, case.config.name)].status == "forbidden-call"


def test_requires_grad_under_inference_mode_obtains_no_gradient(cases):
    """requires_grad set through the attribute and grad recording switched on: each step is reported,
    and no graph is ever built: the child's own reply (before the parent replaces it with the evidence)
    carries the zeros the cell assigns when no graph was recorded."""
    cell = ("with torch.enable_grad():\n    c = counts_sum_inv.clone()\n    c.requires_grad = True\n"
            "    y = (counts * c * dprobs).sum()\n"
            "dcounts_sum_inv = torch.zeros_like(c) if y.grad_fn is None else torch.ones_like(c)\ndel c\n")
    replies = []
    receive = sandbox.Child.receive

    def logged(self, *args, **kwargs):
        header, tensors = receive(self, *args, **kwargs)
        for index, reply in enumerate(header.get("answers", [])):
            if reply["grade_id"] == "dcounts_sum_inv" and reply["check"] == CHAIN:
                replies.append((reply["status"], tensors.get(f"answer{index}")))
        return header, tensors

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sandbox.Child, "receive", logged)
        attempt = sandbox.run({**REFERENCE, "dcounts_sum_inv": cell}, cases[:1],
                              sandbox.Limits(timeout=60, cell_timeout=10))
    outcome = attempt.outcomes[("dcounts_sum_inv", CHAIN, cases[0].config.name)]
    assert outcome.status == "autograd" and outcome.tensor is None
    assert outcome.detail["evidence"] == ["switched grad recording on", "set requires_grad"]
    [(status, answer)] = replies
    assert status == "tensor" and answer.shape == cases[0].values["counts_sum_inv"].shape and not answer.any()


def test_the_reference_cells_beside_the_attacks_are_right_and_unreported(attacked, cases):
    attacked_ids = {g for cell in ATTACKS for g in _ids(cell)}
    checked = 0
    for (grade_id, check, name), outcome in attacked.outcomes.items():
        if grade_id in attacked_ids:
            continue
        case = next(c for c in cases if c.config.name == name)
        assert outcome.status == "tensor", (grade_id, check, name, outcome)
        if check == CHAIN or grade_id in case.local:
            tol = COURSE.tolerance
            assert compare(outcome.tensor, case.expected(EXERCISE.by_grade_id[grade_id], check), rtol=tol.rtol,
                           atol=tol.atol).passed
            checked += 1
    assert checked > 20


def test_the_reference_answers_are_reported_for_nothing(cases, training):
    """Importing the torch and F a cell is given anyway is not reported either (correct answers do)."""
    cells = {**REFERENCE, "dprobs": "import torch\n" + REFERENCE["dprobs"],
             "dh": "import torch.nn.functional as F\nfrom torch import nn\n" + REFERENCE["dh"]}
    attempt = sandbox.run(cells, cases, sandbox.Limits(timeout=60, cell_timeout=10), training)
    assert attempt.error is None
    assert {o.status for o in attempt.outcomes.values()} == {"tensor"}


# ---------------------------------------------------------------------------------------------
# A cell that timed out is not run again


def _counted_run(cells, cases, training):
    """sandbox.run, with every evidence message the child sent: each run of a cell that imports os sends
    one, under that run's case and check."""
    runs = []
    real = sandbox._evidence

    def counted(header, *context):
        runs.append((header.get("grade_id"), header.get("case"), header.get("check")))
        return real(header, *context)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sandbox, "_evidence", counted)
        attempt = sandbox.run(cells, cases, sandbox.Limits(timeout=60, cell_timeout=0.5), training)
    return attempt, runs


def _in_run_order(cases):
    """The lecture-sized probe runs first, the hidden configurations after it (see sandbox.run)."""
    return sorted(cases, key=lambda case: case.config.scored)


def test_a_cell_that_timed_out_runs_once_in_the_submission(cases):
    loop = "import os\nwhile True:\n    pass\n"
    attempt, runs = _counted_run({**REFERENCE, "dbnvar": loop}, cases, None)
    assert attempt.error is None, attempt.error
    ordered = _in_run_order(cases)
    assert runs == [("dbnvar", ordered[0].config.name, LOCAL)]  # the first run, and no other
    statuses = [attempt.outcomes[("dbnvar", check, case.config.name)].status
                for case in ordered for check in (LOCAL, CHAIN)]
    assert statuses == ["forbidden-call"] + ["timeout"] * (len(statuses) - 1)
    assert all(attempt.outcomes[("dbndiff2", CHAIN, case.config.name)].status == "tensor" for case in cases)


def test_exercise_4s_cell_that_timed_out_runs_once_for_every_ex4_grade_id_and_the_training(cases, training):
    loop = REFERENCE[EX4.cell].replace("def manual_backward(params, cache, Yb):",
                                       "def manual_backward(params, cache, Yb):\n"
                                       "    import os\n    while True:\n        pass", 1)
    attempt, runs = _counted_run({**REFERENCE, EX4.cell: loop}, cases, training)
    assert attempt.error is None, attempt.error
    ordered = _in_run_order(cases)
    assert runs == [(EX4.cell, ordered[0].config.name, CHAIN)]
    assert attempt.outcomes[(EXERCISE.training.grade_id, CHAIN, training.config.name)].status == "timeout"
    for case in ordered[1:]:
        assert {attempt.outcomes[(g, CHAIN, case.config.name)].status for g in EX4_IDS} == {"timeout"}


# ---------------------------------------------------------------------------------------------
# No hidden size in feedback


def _feedback(cells, cases, grade_id):
    attempt = sandbox.run(cells, cases, sandbox.Limits(timeout=60, cell_timeout=10))
    graded = {"s": suite.Graded(extract.Submission("s", Path("s.ipynb"), cells=cells), attempt)}
    results = suite.run(graded, cases, None, COURSE, ROOT / "autotests")
    return attempt, results["s"][(grade_id, CHAIN)].feedback


def _hidden_numbers(cases) -> set[str]:
    numbers = set()
    for case in cases:
        if case.config.scored:
            s = case.config.sizes
            numbers |= {str(x) for x in (s.n * s.block_size * s.n_embd, s.n * s.vocab,
                                         s.block_size * s.n_embd * s.n_hidden)}
    return numbers


def test_an_error_only_hidden_sizes_raise_shows_no_hidden_size(cases):
    """Hard-coded lecture sizes: right on the lecture-sized probe, a `view` error on every hidden
    configuration, whose message holds n*block_size*n_embd."""
    attempt, feedback = _feedback({**REFERENCE, "demb": "demb = dembcat.view(32, 3, 10)\n"}, cases, "demb")
    hidden = next(c for c in cases if c.config.scored)
    raw = attempt.outcomes[("demb", CHAIN, hidden.config.name)].detail["error"]
    s = hidden.config.sizes
    assert str(s.n * s.block_size * s.n_embd) in raw  # the child's own message has it
    assert feedback.startswith("RuntimeError on a hidden configuration (its message is not shown"), feedback
    assert not any(number in feedback for number in _hidden_numbers(cases)), feedback


def test_an_error_the_lecture_sizes_raise_too_is_shown_from_the_lecture_run(cases):
    attempt, feedback = _feedback({**REFERENCE, "demb": "demb = dembcat.view(7, 5)\n"}, cases, "demb")
    probe = next(c for c in cases if not c.config.scored)
    public = attempt.outcomes[("demb", CHAIN, probe.config.name)].detail["error"]
    assert str(probe.n * probe.config.sizes.block_size * probe.config.sizes.n_embd) in public
    assert public in feedback, feedback
    assert not any(number in feedback for number in _hidden_numbers(cases)), feedback


def test_a_wrong_shape_only_hidden_sizes_show_names_no_hidden_size(cases):
    """A shape right for the lecture's sizes only: neither the shape the cell gave on a hidden
    configuration nor the one expected there is shown, in the message or in its hints."""
    _, feedback = _feedback({**REFERENCE, "dlogprobs": "dlogprobs = torch.zeros(32, 27)\n"}, cases, "dlogprobs")
    assert "dlogprobs: its shape is not the gradient's on a hidden configuration" in feedback, feedback
    assert not any(number in feedback for number in _hidden_numbers(cases)), feedback


def test_zeros_of_a_lecture_size_are_not_called_right_where_the_gradient_is_zero(cases):
    """A student trial: `db1 = torch.zeros(64)` was told "right for the lecture's sizes", where db1 is all
    zeros only because batch norm follows b1 (the grader gives zeros of the right size half credit)."""
    _, feedback = _feedback({**REFERENCE, "db1": "db1 = torch.zeros(64, dtype=torch.float64)\n"}, cases, "db1")
    assert "right for the notebook's sizes" not in feedback, feedback
    assert "where this gradient is all zeros, which says nothing of its values" in feedback, feedback
    assert "never 32, 27 or 64" in feedback, feedback


def test_a_wrong_shape_on_the_lecture_sizes_too_is_shown_from_the_lecture_run(cases):
    _, feedback = _feedback({**REFERENCE, "dlogprobs": "dlogprobs = logprobs[:, :1] * 0\n"}, cases, "dlogprobs")
    probe = next(c for c in cases if not c.config.scored)
    assert f"shape ({probe.n}, 1), expected ({probe.n}, {probe.config.sizes.vocab})" in feedback, feedback
    assert not any(number in feedback for number in _hidden_numbers(cases)), feedback


def test_the_lecture_sized_run_ends_before_the_child_holds_anything_hidden(cases):
    """What feedback shows comes from the public run: a value a cell stashes where every later run finds
    it (the interpreter's own builtins module) never reaches it from a hidden run, since none has
    happened yet; the hidden runs find the public one's."""
    stash = ('import builtins\nseen = builtins.__dict__.setdefault("seen", [])\nseen.append(f"n{n}")\n'
             "raise ValueError(str(seen))\n")
    attempt = sandbox.run({**REFERENCE, "dcounts": stash}, cases, sandbox.Limits(timeout=60, cell_timeout=10))

    def raised(check, case) -> str:
        outcome = attempt.outcomes[("dcounts", check, case.config.name)]
        return (outcome.answered or outcome).detail["error"]  # the import is reported: what the cell raised

    probe = next(c for c in cases if not c.config.scored)
    assert raised(LOCAL, probe) == str([f"n{probe.n}"])
    assert raised(CHAIN, probe) == str([f"n{probe.n}"] * 2)
    for case in cases:
        if case.config.scored:
            assert raised(CHAIN, case).startswith(str([f"n{probe.n}"] * 2)[:-1]), raised(CHAIN, case)


@pytest.mark.parametrize("reported, bound, kept", [
    (0.0123456, 1.0, 0.012), (11007.0, 0.25, 0.25), (float("nan"), 1.0, None), (-1.0, 1.0, None),
    ("11007", 1.0, None), (True, 1.0, None)])
def test_a_training_time_the_child_reports_is_kept_only_as_a_bounded_rounded_measurement(reported, bound, kept):
    assert sandbox._timing(reported, bound) == kept
