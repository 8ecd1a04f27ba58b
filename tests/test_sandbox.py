"""grader.sandbox.parent: student code runs in a child process that holds no true gradient before its own
answer for it is back, survives what a notebook does to it, and never outlives the submission.

Each scenario below shares a child with others (the reference run, one run of misbehaving cells, one
per way of ending the child), so that a failure names the exchange it happened in.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
import torch

from grader.authoring import skeleton
from grader.exercise import load
from grader.exercises.makemore_mlp import EXERCISE
from grader.judge.compare import compare
from grader.judge.configs import generate
from grader.judge.exam import CHAIN, LOCAL, checks, prepare
from grader.sandbox import parent as sandbox
from grader.sandbox import static_check
from helpers.children import group_members
from helpers.notebooks import reference_sources
from helpers.paths import COURSE

TOL = COURSE.tolerance
REFERENCE = reference_sources()


@pytest.fixture(scope="module")
def cases():
    return [prepare(c) for c in generate("makemore-mlp", "sandbox-test-salt", 4)]


def expected_keys(cases) -> set[tuple[str, str, str]]:
    """Every (grade id, check, case) the sandbox runs; it must include every check the suite scores."""
    keys = {(g, LOCAL, case.config.name) for case in cases for g in EXERCISE.local_schedule()}
    keys |= {(g, CHAIN, case.config.name) for case in cases for g in EXERCISE.chain_schedule()}
    scored = {(a.grade_id, check, case.config.name) for case in cases for a in EXERCISE.answers for check in checks(a)}
    assert scored <= keys
    return keys


def has_expectation(case, grade_id: str, check: str) -> bool:
    """A LOCAL run of a cell with no LOCAL check (dlogprobs) only feeds later cells: nothing to compare."""
    return check == CHAIN or grade_id in case.local


def right(attempt, case, grade_id: str, check: str) -> bool:
    outcome = attempt.outcomes[(grade_id, check, case.config.name)]
    if outcome.status != "tensor":
        return False
    if not has_expectation(case, grade_id, check):
        return True
    expected = case.expected(EXERCISE.by_grade_id[grade_id], check)
    comparison = compare(outcome.tensor, expected, rtol=TOL.rtol, atol=TOL.atol)
    return comparison.passed


def logged_run(cells, cases, *, children: int = 1, **limits):
    """sandbox.run, with every message between parent and children logged in order, and the pid of each of
    the `children` it started (one unless a cell stopped a child)."""
    log, pids = [], []
    send, receive, init = sandbox.Child.send, sandbox.Child.receive, sandbox.Child.__init__

    def logged_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        pids.append(self.pid)

    def logged_send(self, header, tensors=None, *args, **kwargs):
        log.append(("send", header, dict(tensors or {})))
        return send(self, header, tensors, *args, **kwargs)

    def logged_receive(self, *args, **kwargs):
        header, tensors = receive(self, *args, **kwargs)
        log.append(("recv", header, tensors))
        return header, tensors

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sandbox.Child, "__init__", logged_init)
        mp.setattr(sandbox.Child, "send", logged_send)
        mp.setattr(sandbox.Child, "receive", logged_receive)
        attempt = sandbox.run(cells, cases, sandbox.Limits(**limits))
    assert len(pids) == children, pids
    return attempt, log, pids[0] if children == 1 else pids


# ---------------------------------------------------------------------------------------------
# The reference answers, every message logged


@pytest.fixture(scope="module")
def reference_run(cases):
    return logged_run(REFERENCE, cases, timeout=60, cell_timeout=10)


def test_the_reference_answers_match_every_expectation(reference_run, cases):
    attempt, _, _ = reference_run
    assert attempt.error is None
    assert set(attempt.outcomes) == expected_keys(cases)
    for (grade_id, check, name), outcome in attempt.outcomes.items():
        case = next(c for c in cases if c.config.name == name)
        assert outcome.status == "tensor", (grade_id, check, name, outcome)
        assert type(outcome.tensor) is torch.Tensor
        if not has_expectation(case, grade_id, check):
            continue
        comparison = compare(outcome.tensor, case.expected(EXERCISE.by_grade_id[grade_id], check), rtol=TOL.rtol,
                             atol=TOL.atol)
        assert comparison.passed, (grade_id, check, name, comparison.message)
    assert 0 < attempt.seconds < 60


def _case(cases, name):
    return next(c for c in cases if c.config.name == name)


def test_no_true_gradient_is_revealed_before_the_childs_answer_for_it(reference_run, cases):
    _, log, _ = reference_run
    answered: set[tuple[str, str, str]] = set()
    revealed: dict[tuple[str, str], int] = {}  # (case, gradient) -> position in the log
    answer_at: dict[tuple[str, str, str], int] = {}
    for position, (direction, header, tensors) in enumerate(log):
        # Every case's LOCAL pass in one "answers" message, then one step of the chain on every case per message.
        replies = header.get("answers", [])
        if direction == "recv" and replies:
            for reply in replies:
                key = (reply["grade_id"], reply["check"], reply["case"])
                target = "d" + EXERCISE.by_grade_id[reply["grade_id"]].source
                # The child answered before it could have seen the true value of what it computes.
                assert (reply["case"], target) not in revealed, (key, "answered after its truth was revealed")
                answered.add(key)
                answer_at[key] = position
        elif direction == "send" and header.get("op") == "upstream" and header.get("check") == CHAIN:
            case = _case(cases, header["case"])
            assert len(tensors) == 1, f"several gradients revealed at once: {sorted(tensors)}"
            # The public (lecture-sized) case runs to its end first, then the hidden ones: within a phase, not
            # before its answer on this case nor on any other, so no case's truth helps with another's; a
            # public truth is the public case's, whose every value a student may compute anyway.
            phase = [c for c in cases if c.config.scored == case.config.scored]
            for g, value in tensors.items():
                assert all((g, CHAIN, c.config.name) in answered for c in phase), \
                    f"true {g} revealed on {case.config.name} before every case's answer"
                assert torch.equal(value, case.truth[g])
                revealed[(case.config.name, g)] = position
    # Not vacuous: every gradient was revealed on every case, and every answer came back.
    assert set(revealed) == {(c.config.name, g) for c in cases for g in EXERCISE.atomic}
    assert answered == expected_keys(cases)
    # The fused answers arrive before the truth they compute is revealed.
    for case in cases:
        name = case.config.name
        assert answer_at[("ex2_dlogits", CHAIN, name)] < revealed[(name, "dlogits")]
        assert answer_at[("ex3_dhprebn", CHAIN, name)] < revealed[(name, "dhprebn")]
        assert answer_at[("ex3_dhprebn", LOCAL, name)] < revealed[(name, "dhprebn")]


def test_no_local_pass_message_carries_a_true_gradient(reference_run, cases):
    _, log, _ = reference_run
    sends = [(h, t) for d, h, t in log if d == "send"]
    # Two phases, the public case's, then the hidden ones': each opens with its cases' forward passes and random
    # upstream gradients and one exchange of their LOCAL pass, before any run of its CHAIN pass.
    for scored in (False, True):
        names = {c.config.name for c in cases if c.config.scored == scored}
        start = next(i for i, (h, _) in enumerate(sends) if h.get("op") == "case" and h["case"] in names)
        end = next(i for i, (h, _) in enumerate(sends) if i > start and h.get("op") == "run_many"
                   and h.get("check") == CHAIN)
        local_phase = sends[start:end]
        assert {h["op"] for h, _ in local_phase} == {"case", "upstream", "run_many"}
        assert sum(h["op"] == "run_many" for h, _ in local_phase) == 1
        assert all(h.get("check") == LOCAL for h, _ in local_phase if h["op"] in ("upstream", "run_many"))
        assert {h["case"] for h, _ in local_phase if h["op"] == "case"} == names
        assert {h["case"] for h, _ in local_phase if h["op"] == "upstream"} == names
    local_phase = [(h, t) for h, t in sends if h.get("op") == "case"]
    for header, tensors in local_phase:
        if header["op"] == "case":
            assert set(tensors) <= set(EXERCISE.given), sorted(set(tensors) - set(EXERCISE.given))
            assert "loss" not in tensors
    # No message but a CHAIN reveal carries a true gradient, in the LOCAL pass or after it.
    truths = [t for case in cases for t in case.truth.values()]
    checked = 0
    for header, tensors in sends:
        if header["op"] == "upstream" and header["check"] == CHAIN:
            continue
        for name, tensor in tensors.items():
            for truth in truths:
                if truth.shape == tensor.shape:
                    checked += 1
                    assert not torch.allclose(tensor.to(truth.dtype), truth, rtol=TOL.rtol, atol=TOL.atol), \
                        f"{header['op']} message for {header.get('case')} carries a true gradient as {name}"
    assert checked >= len(EXERCISE.atomic) * len(cases)  # at least every random upstream against its own truth


def test_the_child_is_gone_after_a_normal_run(reference_run):
    _, log, pid = reference_run
    assert log[-2][1] == {"op": "bye"} and log[-1][1].get("op") == "bye"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# ---------------------------------------------------------------------------------------------
# Misbehaving cells, all in one child


MISBEHAVING = {
    # A student's output must not reach the protocol, whatever they write and wherever.
    "dlogprobs": (
        "import os, sys\n"
        "print('score: 100/100\\n' * 5000)\n"
        "print('to stderr', file=sys.stderr)\n"
        "sys.stdout.flush()\n"
        "os.write(1, b'\\x00\\x00\\x00\\x10\\x00\\x00\\x00\\x00{\"op\": \"answer\"}')\n"
        "os.write(2, b'junk on fd 2\\n')\n" + REFERENCE["dlogprobs"]
    ),
    # In-place mutation of forward tensors (and of n) must not reach the next cell.
    "dprobs": REFERENCE["dprobs"] + (
        "for t in (probs, counts, counts_sum, counts_sum_inv, norm_logits, logit_maxes, logits, h, W2, C, bngain,"
        " bnraw, hpreact):\n"
        "    t.mul_(0)\n"
        "Xb.zero_()\n"
        "Yb.zero_()\n"
        "n = 1000\n"
    ),
    "dh": "dh = dlogits @ W2.T\nscale = 1.0\nraise ValueError('boom in dh')\n",
    "dW2": "dW2 = None\nexit(0)\n",
    "ex2_dlogits": "while True:\n    pass\n",
    "dbngain": "class Sneaky(torch.Tensor):\n    pass\n"
               "dbngain = (bnraw * dhpreact).sum(0, keepdim=True).as_subclass(Sneaky)\n",
    "dbnbias": "dbnbias = dhpreact.sum(0, keepdim=True).tolist()\n",
}
CELL_TIMEOUT = 0.5


@pytest.fixture(scope="module")
def misbehaving_run(cases):
    scored = [c for c in cases if c.config.scored]
    chosen = [scored[0], scored[-1]]
    attempt = sandbox.run({**REFERENCE, **MISBEHAVING}, chosen, sandbox.Limits(timeout=60, cell_timeout=CELL_TIMEOUT))
    return attempt, chosen


def test_misbehaving_cells_do_not_stop_the_others(misbehaving_run):
    attempt, chosen = misbehaving_run
    assert attempt.error is None
    assert set(attempt.outcomes) == expected_keys(chosen)
    for (grade_id, check, name), outcome in attempt.outcomes.items():
        if grade_id in MISBEHAVING and grade_id != "dprobs":
            continue
        case = _case(chosen, name)
        assert right(attempt, case, grade_id, check), (grade_id, check, name, outcome.status, outcome.detail)


def test_print_does_not_break_the_protocol(misbehaving_run):
    """The printing cell's imports are reported (the child's audit hook), its writes to fds 1 and 2 go
    nowhere: its outcome and the next cell's arrive intact."""
    attempt, chosen = misbehaving_run
    assert attempt.error is None
    for case in chosen:
        for check in (LOCAL, CHAIN):
            outcome = attempt.outcomes[("dlogprobs", check, case.config.name)]
            assert outcome.status == "forbidden-call" and "import('os')" in outcome.detail["evidence"]
        assert right(attempt, case, "dprobs", CHAIN)


def test_in_place_mutation_does_not_reach_the_next_cell(misbehaving_run):
    attempt, chosen = misbehaving_run
    # Each of these reads a tensor the dprobs cell zeroed (or n, or Xb/Yb).
    later = ["dcounts_sum_inv", "dcounts", "dnorm_logits", "dlogits", "dhpreact", "dbnraw", "dC",
             "ex3_dhprebn", "ex4_dC", "ex4_dW2"]
    for case in chosen:
        for grade_id in later:
            for check in checks(EXERCISE.by_grade_id[grade_id]):
                assert right(attempt, case, grade_id, check), (grade_id, check, case.config.name)


def test_an_exception_is_an_error_with_its_type_and_line(misbehaving_run):
    attempt, chosen = misbehaving_run
    for case in chosen:
        for check in checks(EXERCISE.by_grade_id["dh"]):
            outcome = attempt.outcomes[("dh", check, case.config.name)]
            assert outcome.status == "error"
            assert outcome.detail["error_type"] == "ValueError"
            assert outcome.detail["line"] == 3
            assert "boom in dh" in outcome.detail["error"]
            assert outcome.tensor is None


def test_sys_exit_is_an_error_of_that_cell_only(misbehaving_run):
    attempt, chosen = misbehaving_run
    for case in chosen:
        for check in checks(EXERCISE.by_grade_id["dW2"]):
            outcome = attempt.outcomes[("dW2", check, case.config.name)]
            assert outcome.status == "error" and outcome.detail["error_type"] == "SystemExit"
            assert outcome.detail["line"] == 2
        assert right(attempt, case, "db2", CHAIN) and right(attempt, case, "db2", LOCAL)


def test_an_infinite_loop_hits_the_cell_time_limit(misbehaving_run):
    attempt, chosen = misbehaving_run
    for case in chosen:
        outcome = attempt.outcomes[("ex2_dlogits", CHAIN, case.config.name)]
        assert outcome.status == "timeout" and outcome.detail["seconds"] == CELL_TIMEOUT
        # The gradient after it in the schedule still ran, and right.
        assert right(attempt, case, "dlogits", CHAIN)
    # One loop of CELL_TIMEOUT (the cell is not run again on the second case), not the whole-submission
    # limit. How many times it ran is counted in test_second_lock.
    assert CELL_TIMEOUT <= attempt.seconds < 30


def test_a_tensor_subclass_and_a_non_tensor_are_named(misbehaving_run):
    attempt, chosen = misbehaving_run
    for case in chosen:
        for check in checks(EXERCISE.by_grade_id["dbngain"]):
            outcome = attempt.outcomes[("dbngain", check, case.config.name)]
            assert outcome.status == "subclass" and outcome.detail["type"] == "Sneaky" and outcome.tensor is None
        for check in checks(EXERCISE.by_grade_id["dbnbias"]):
            outcome = attempt.outcomes[("dbnbias", check, case.config.name)]
            assert outcome.status == "not-tensor" and outcome.detail["type"] == "list" and outcome.tensor is None


# ---------------------------------------------------------------------------------------------
# Ending the child


def assert_no_process_left(pgid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pgid, 0)  # the child itself was reaped
    live = {pid: state for pid, state in group_members(pgid).items() if state != "Z"}
    assert live == {}, f"processes of the submission still running: {live}"
    # Orphans killed with the group are reaped by init; wait for that, a little.
    for _ in range(100):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    assert all(state == "Z" for state in group_members(pgid).values())


def only_reported(attempt, cell_id: str, case) -> bool:
    """No answer came back from the exchange the child ended, but the audit hook's report of the cell's
    `import` did: it arrived before the cell went on."""
    return {k: o.status for k, o in attempt.outcomes.items()} == {(cell_id, LOCAL, case.config.name): "forbidden-call"}


def stopped_alone(attempt, cell_id: str, case, status: str, **detail) -> None:
    """The cell that stopped its child is recorded as `status` (under the audit hook's flag, where it
    imported something) on each of its runs, and every other answer is right: those of the exchange the
    child ended, run again in a fresh child, and every later one, on its true upstream gradients."""
    assert attempt.error is None, attempt.error
    assert set(attempt.outcomes) == expected_keys([case])
    for (grade_id, check, _), outcome in attempt.outcomes.items():
        if grade_id == cell_id:
            outcome = outcome.answered or outcome
            assert outcome.status == status and outcome.detail == detail, (check, outcome.status, outcome.detail)
        else:
            assert right(attempt, case, grade_id, check), (grade_id, check, outcome.status, outcome.detail)


def test_a_right_answers_idioms_are_never_reported():
    """Karpathy's exercise 2, `dlogits[range(n), Yb] -= 1`, made torch's argument parser import torch.storage
    through the cell's own __import__ the first time a child ran it, where no forward pass before it had
    indexed with a range (the attention gallery's, whose loss is F.cross_entropy): the right answer was
    reported as a forbidden call on the lecture-sized run, and a wrong one told its mistake without that
    run's numbers. The fork server runs such idioms once before any child."""
    exercise = load("attention")
    cells = {**skeleton.references(exercise),
             "ex2_dlogits": "dlogits = F.softmax(logits, 1)\ndlogits[range(Yb.shape[0]), Yb] -= 1\n"
                            "dlogits /= Yb.shape[0]\nprint(dlogits[[0, 1]], f'{dlogits.sum():.3f}')\n",
             # an instructor trial's: the import the static check accepts, reported by the child as forbidden
             "dout": "import math\n" + skeleton.references(exercise)["dout"] + "dout = dout * math.sqrt(1.0)\n"}
    assert static_check.check(cells["dout"]) is None
    cases = [prepare(c) for c in generate("attention", "idioms", 2)]
    attempt = sandbox.run(cells, cases, sandbox.Limits(timeout=60, cell_timeout=10))
    reported = {key: outcome.detail for key, outcome in attempt.outcomes.items() if outcome.status != "tensor"}
    assert not reported, reported
    assert {key[2] for key in attempt.outcomes if key[0] == "ex2_dlogits"} == {c.config.name for c in cases}
    for case in cases:
        for grade_id in ("ex2_dlogits", "dout"):
            answer = exercise.by_grade_id[grade_id]
            got = attempt.outcomes[(grade_id, CHAIN, case.config.name)].tensor
            assert compare(got, case.expected(answer, CHAIN), rtol=TOL.rtol, atol=TOL.atol).passed, grade_id


def test_tensor_math_an_outside_trial_wrote_is_accepted_and_right(cases):
    """Right answers an outside trial wrote, each refused by the static check (0 and an integrity flag) though its
    twin was allowed: .addmm_ beside torch.addmm, torch.addcdiv beside addcmul, .broadcast_to beside
    torch.broadcast_to, .swapdims beside .swapaxes, torch.inner, torch.bincount."""
    written = {
        "dW2": "dW2 = torch.zeros_like(W2)\nfor i in range(n):\n    dW2.addr_(h[i], dlogits[i])\n",
        "dW1": "dW1 = torch.zeros_like(W1)\ndW1.addmm_(embcat.T, dhprebn)\n",
        "dcounts_sum_inv": "dcounts_sum_inv = torch.diagonal(torch.inner(counts, dprobs)).unsqueeze(1)\n",
        "dcounts_sum": "dcounts_sum = torch.addcdiv(torch.zeros_like(counts_sum), dcounts_sum_inv, "
                       "counts_sum.square(), value=-1)\n",
        "dcounts": "dcounts = dprobs * counts_sum_inv + dcounts_sum.broadcast_to(counts.shape)\n",
        "dh": "dh = dlogits @ W2.swapdims(0, 1)\n",
        "dC": "dC = torch.stack([torch.bincount(Xb.view(-1), weights=demb.reshape(-1, C.shape[1])[:, j], "
              "minlength=C.shape[0]) for j in range(C.shape[1])], 1)\n",
    }
    assert {cell: static_check.check(code) for cell, code in written.items()} == dict.fromkeys(written)
    case = cases[0]
    attempt = sandbox.run({**REFERENCE, **written}, [case], sandbox.Limits(timeout=60, cell_timeout=10))
    for grade_id in written:
        for check in checks(EXERCISE.by_grade_id[grade_id]):
            assert right(attempt, case, grade_id, check), (grade_id, check, attempt.outcomes[(grade_id, check,
                                                                                              case.config.name)])


@pytest.mark.parametrize("code", [0, 3])
def test_os_exit_costs_that_cell_alone(cases, code):
    """A case's LOCAL pass is one exchange: the cell that ends the child there ends the exchange. Its
    cells run again one by one in fresh children, that one ends a child again and is skipped from then
    on, and the rest of the submission is graded. The feedback says the process ended, never with the
    exit status the cell chose (a number that could spell a hidden size)."""
    case = cases[0]
    attempt, _, pids = logged_run({**REFERENCE, "dbnvar": f"import os\nos._exit({code})\n"}, [case],
                                  children=3, timeout=60, cell_timeout=10)
    stopped_alone(attempt, "dbnvar", case, "crashed", crash=sandbox.CRASHES["exit"])
    for pid in pids:
        assert_no_process_left(pid)


def test_closing_the_protocol_and_exiting_costs_that_cell_alone(cases):
    """The child closes its pipes and exits a moment later: the parent sees end-of-file while the
    child is still alive. That too is the cell's doing, not a failure of the grader."""
    case = cases[0]
    cell, cell_id = "import os, time\nos.closerange(3, 1024)\ntime.sleep(0.3)\nos._exit(0)\n", "dcounts"
    attempt, _, pids = logged_run({**REFERENCE, "dcounts": cell}, [case], children=3, timeout=60, cell_timeout=10)
    stopped_alone(attempt, cell_id, case, "crashed", crash=sandbox.CRASHES["exit"])
    for pid in pids:
        assert_no_process_left(pid)


@pytest.fixture
def shared_dir():
    """A folder the sandboxed child may write to, whatever user it runs as."""
    path = Path(tempfile.mkdtemp(prefix="bpn-test-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_submission_time_limit_stops_everything_the_notebook_started(cases, shared_dir):
    case = cases[0]
    pidfile = shared_dir / "grandchild.pid"
    cell = ("import subprocess\n"
            "try:\n"
            "    p = subprocess.Popen(['sleep', '300'])\n"
            f"    open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
            "except Exception:\n"
            "    pass  # a sandbox that forbids processes is fine too\n"
            "while True:\n    pass\n")
    started = time.monotonic()
    attempt, _, pid = logged_run({**REFERENCE, "dcounts": cell}, [case], timeout=2.5, cell_timeout=60)
    elapsed = time.monotonic() - started
    assert attempt.error is not None and "time limit" in attempt.error, attempt.error
    assert "2.5 s" in attempt.error
    assert elapsed < 2.5 + 5
    assert only_reported(attempt, "dcounts", case)  # stopped inside the case's LOCAL exchange
    grandchild = int(pidfile.read_text()) if pidfile.exists() else None
    assert_no_process_left(pid)
    if grandchild is not None:
        state = group_members(pid).get(grandchild)
        assert state in (None, "Z"), f"the notebook's subprocess survived: state {state}"
        if state is None and Path(f"/proc/{grandchild}").exists():
            stat = Path(f"/proc/{grandchild}/stat").read_text()
            assert stat[stat.rindex(")") + 2] == "Z", \
                f"the notebook's subprocess survived outside its group: {stat[:80]}"


# What a cell can do to the in-child timer: ignore its signal, or catch what it raises, forever.
TIMER_DEFEATS = {
    "ignored": "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass\n",
    "caught": "import os\nwhile True:\n    try:\n        while True:\n            pass\n"
              "    except BaseException:\n        pass\n",
}


@pytest.mark.parametrize("defeat", list(TIMER_DEFEATS))
def test_a_cell_that_defeats_its_timer_is_stopped_one_limit_after_it_started(cases, defeat):
    """The cell runs late in a case's LOCAL exchange, which holds some twenty cells: the parent stops it
    one cell's limit and the grace after it started, not after the limits of every cell of the exchange
    (25 s here), and the audit hook's report of its import still arrives. It alone scores 0."""
    case = cases[0]
    cell_timeout = 1
    started = time.monotonic()
    attempt, log, pids = logged_run({**REFERENCE, "dbnvar": TIMER_DEFEATS[defeat]}, [case], children=3,
                                    timeout=60, cell_timeout=cell_timeout)
    elapsed = time.monotonic() - started
    stopped_alone(attempt, "dbnvar", case, "timeout", seconds=cell_timeout)
    # Stopped in the exchange of the whole LOCAL pass, and once more when its cells ran one by one to
    # find the one that would not stop; never again.
    assert elapsed < 2 * (cell_timeout + sandbox.GRACE_SECONDS) + 4, elapsed
    for pid in pids:
        assert_no_process_left(pid)


@pytest.mark.slow
def test_cells_slower_together_than_one_limit_are_not_stopped(cases):
    """Nine cells of 0.8 s in one exchange, each within its limit of 1 s and together past one limit and
    the grace: the child's announcements keep the parent waiting, and every answer arrives."""
    case = cases[0]
    slow = [g for g in EXERCISE.local_schedule() if g in EXERCISE.atomic][:9]
    cells = {**REFERENCE, **{g: "import time\ntime.sleep(0.8)\n" + REFERENCE[g] for g in slow}}
    attempt, log, _ = logged_run(cells, [case], timeout=60, cell_timeout=1)
    assert attempt.error is None, attempt.error
    assert sum(1 for way, header, _ in log if way == "recv" and header.get("op") == "started") >= 2
    for (grade_id, check, _), outcome in attempt.outcomes.items():
        if grade_id in slow:
            assert outcome.status == "forbidden-call" and "import('time')" in outcome.detail["evidence"]
            outcome = outcome.answered
        if has_expectation(case, grade_id, check):
            comparison = compare(outcome.tensor, case.expected(EXERCISE.by_grade_id[grade_id], check), rtol=TOL.rtol,
                                 atol=TOL.atol)
            assert comparison.passed, (grade_id, check)


# Exceptions whose message would run the student's code after the cell's timer stopped: a __str__ that
# never returns, and an argument whose __str__ and __repr__ raise.
UNPRINTABLE = {
    "dh": "class Late(Exception):\n    def __str__(self):\n        while True:\n            pass\n"
          "raise Late('told', 3)\n",
    "dW2": "class Bad:\n    def __str__(self):\n        raise RuntimeError('from __str__')\n    __repr__ = __str__\n"
           "raise ValueError(Bad())\n",
}


def test_an_exception_whose_message_runs_student_code_is_named_without_running_it(cases):
    case = cases[0]
    attempt = sandbox.run({**REFERENCE, **UNPRINTABLE}, [case], sandbox.Limits(timeout=60, cell_timeout=10))
    assert attempt.error is None, attempt.error
    for check in checks(EXERCISE.by_grade_id["dh"]):
        outcome = attempt.outcomes[("dh", check, case.config.name)]
        assert outcome.status == "error" and outcome.detail["error_type"] == "Late", outcome.detail
        assert outcome.detail["error"] == "('told', 3)" and outcome.detail["line"] == 5
    for check in checks(EXERCISE.by_grade_id["dW2"]):
        outcome = attempt.outcomes[("dW2", check, case.config.name)]
        assert outcome.detail == {"error_type": "ValueError", "error": "<Bad object>", "line": 5}, outcome.detail
    assert right(attempt, case, "db2", CHAIN) and right(attempt, case, "dbngain", CHAIN)


def test_an_answer_the_wire_cannot_carry_spoils_only_itself(cases):
    """safetensors has no complex128: in a LOCAL exchange that answer alone is unsendable, the others of
    the same exchange arrive, and the CHAIN pass goes on."""
    case = cases[0]
    attempt = sandbox.run({**REFERENCE, "dcounts": "dcounts = torch.zeros(counts.shape, dtype=torch.complex128)\n"},
                          [case], sandbox.Limits(timeout=60, cell_timeout=10))
    assert attempt.error is None, attempt.error
    name = case.config.name
    assert [attempt.outcomes[("dcounts", check, name)].status for check in (LOCAL, CHAIN)] == ["unsendable"] * 2
    assert right(attempt, case, "dprobs", LOCAL) and right(attempt, case, "dnorm_logits", LOCAL)
    assert right(attempt, case, "dC", CHAIN)


def test_a_fork_server_that_dies_under_a_child_costs_no_cell(cases, monkeypatch):
    """When the fork server is gone, how the child ended is unknown: that is the environment's fault, so
    the exchange runs again in a fresh child (the server restarts) and no cell is blamed for it; a server
    that dies again under the same exchange stops the batch."""
    case = cases[0]
    ended, calls = sandbox.Child.ended, []

    def server_gone_once(self, exc):
        calls.append(exc)
        return "server" if len(calls) == 1 else ended(self, exc)

    monkeypatch.setattr(sandbox.Child, "ended", server_gone_once)
    attempt = sandbox.run({**REFERENCE, "dbnvar": "import os\nos._exit(0)\n"}, [case],
                          sandbox.Limits(timeout=60, cell_timeout=10))
    stopped_alone(attempt, "dbnvar", case, "crashed", crash=sandbox.CRASHES["exit"])
    monkeypatch.setattr(sandbox.Child, "ended", lambda self, exc: "server")
    with pytest.raises(sandbox.SandboxUnavailable, match="fork server died twice"):
        sandbox.run({**REFERENCE, "dbnvar": "import os\nos._exit(0)\n"}, [case],
                    sandbox.Limits(timeout=60, cell_timeout=10))


def test_a_sandbox_too_slow_to_start_is_the_machines_fault(monkeypatch):
    """On a machine too busy to start a child within a whole submission's time limit (found by an
    instructor's autograde at load 20), the preflight said `TimeoutError` and nbgrader kept the student's
    submission with no score, which formgrader shows as 0: it is the sandbox that did not start."""
    spawn = sandbox.zygote.server.spawn

    def slow(*args, **kwargs):
        time.sleep(1.2)
        return spawn(*args, **kwargs)

    monkeypatch.setattr(sandbox.zygote.server, "spawn", slow)
    with pytest.raises(sandbox.SandboxUnavailable, match="did not start"):
        sandbox.preflight(sandbox.Limits(timeout=1, cell_timeout=1))
