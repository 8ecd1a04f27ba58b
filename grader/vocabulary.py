"""The words the grader's stages pass to each other and show people, each defined once with its text.

- Status: what an answer cell produced on one configuration, as the sandboxed child reports it.
- Match: how a tensor it produced compares with the expected one there.
- Flag: an error the student fixes, or an integrity flag an instructor should look at whatever it scored.
- Verdict: how one grade id of a submission was judged, as results files store it.
- A grade cell's id: nbgrader's name for where one answer's score lives.

Each is a `StrEnum`, so a member equals its string: the wire format and the results JSON carry plain
strings, and a file written before these existed reads the same. A leaf module: the sandbox, the
judge and the outputs all import it, and it imports nothing of theirs.
"""
from __future__ import annotations

from enum import StrEnum


class _Worded(StrEnum):
    """A member with its student-facing text beside its value (and, for a Flag, whether it is one of
    integrity)."""

    def __new__(cls, value: str, text: str | None = None, integrity: bool = False):
        member = str.__new__(cls, value)
        member._value_ = value
        member.text = text
        member.integrity = integrity
        return member


class Status(_Worded):
    """What an answer cell produced. `text` is the feedback's template for a status that is not a
    tensor, with the fields the child reports beside it ({variable} is the answer's variable); a
    tensor is judged by comparing it, and an error is said in its own words."""

    TENSOR = "tensor"
    ERROR = "error"
    BLANK = "blank", "not attempted yet"
    MISSING = "missing", "no answer cell"
    TIMEOUT = "timeout", "the cell ran past its time limit"
    # Said by the parent alone, of a cell that ended or broke its child: {crash} is one of a closed set
    # of texts (grader.sandbox.parent.CRASHES), never anything the child chose.
    CRASHED = "crashed", "the cell stopped the grading process ({crash}); the other cells were graded without it"
    UNASSIGNED = "unassigned", "the cell never assigns {variable}"
    NOT_TENSOR = "not-tensor", "{variable} is a {type}, not a torch.Tensor"
    SUBCLASS = "subclass", "{variable} is a {type}, a subclass of torch.Tensor: give a plain tensor"
    UNSENDABLE = "unsendable", "{variable} could not be read back: {error}"
    BROKEN = "broken", "the grading process sent a malformed answer"
    AUTOGRAD = "autograd", "autograd was used at run time, which an answer must not do: {evidence}"
    FORBIDDEN_CALL = "forbidden-call", "the cell did what no answer needs and the grader forbids: {evidence}"
    BAD_STEP = "bad-step", "at training step {step}, {function} gave no tensor of the right shape for {parameter}"


class Match(StrEnum):
    """How an answer compares with its expected tensor on one configuration (grader.judge.compare). A
    failed answer's kind, as the hidden suite reports it, is one of these or the Status of a cell that
    gave no tensor; the grader's policy and the self-check's line each turn on it."""

    EXACT = "exact"
    APPROXIMATE = "approximate"
    SQUEEZABLE = "squeezable"  # the right values in a shape that differs only by size-1 dimensions
    WRONG = "wrong"
    BLANK = "blank"  # no answer at all (None); the same word as Status.BLANK, so scoring reads either as one

    @property
    def passed(self) -> bool:
        return self in (Match.EXACT, Match.APPROXIMATE)


class Flag(_Worded):
    """A flag's kind; `text` is what the student's feedback says of it. Two sorts: an error the student
    fixes (a syntax error, a cell past its time or memory limit, a crash, the grader's own failure),
    and an integrity flag, for what only someone trying to cheat does (`integrity`): only those mark a
    submission for review (formgrader's "Flagged?", the class report's integrity table). Students see
    every flag of their result, on every route (feedback page, nbgrader, Gradescope). A result's flags
    are JSON objects {"kind": ..., "evidence": ..., and where: "grade_id", "check" or "cell"}."""

    STATIC_CHECK = "static-check", "an answer cell was not run: the static check refused it", True
    FORGED_OUTPUT = ("forged-output", "an answer cell prints what looks like a grading result (it changes no score)",
                     True)
    AUTOGRAD = "autograd", "autograd was used at run time", True
    FORBIDDEN_CALL = "forbidden-call", "an answer cell did what no answer needs and the grader forbids", True
    SYNTAX_ERROR = "syntax-error", "an answer cell could not be run: Python cannot read it (fix it and run it)", False
    TIMEOUT = "timeout", "a cell ran past its time limit", False
    MEMORY = "memory", "a cell ran into the sandbox's memory limit", False
    CRASHED = "crashed", "a cell stopped the grading process (it was skipped, the rest graded)", False
    SANDBOX = "sandbox", "the grading process stopped", False
    GRADER_ERROR = ("grader-error",
                    "the grader itself failed on a test (not your fault: your instructor will look at it)", False)

    @classmethod
    def text_of(cls, kind: str) -> str:
        """The text for a kind read from a results file, which may name one this version does not know."""
        return cls(kind).text if kind in cls._value2member_map_ else "flagged for your instructor"

    @classmethod
    def is_integrity(cls, kind: str) -> bool:
        """A kind this version does not know is kept for review: better looked at once than missed."""
        return cls(kind).integrity if kind in cls._value2member_map_ else True


def flag_groups(flags: list[dict]) -> list[tuple[str, list[tuple[str, str, str, str]]]]:
    """A result's flags as every route shows them to the student (this page, nbgrader's feedback,
    Gradescope's output): errors to fix first, then integrity flags, each as (kind, where, what it means,
    the evidence quoted); a group with no flag is left out."""
    groups = []
    for heading, integrity in (("Errors to fix", False), ("Integrity flags, which your instructor reviews", True)):
        items = [(kind, ", ".join(f"{key} {f[key]}" for key in ("grade_id", "cell", "check") if key in f),
                  Flag.text_of(kind), str(f.get("evidence", "")))
                 for f in flags if Flag.is_integrity(kind := str(f.get("kind", ""))) == integrity]
        if items:
            groups.append((f"{heading} ({len(items)})", items))
    return groups


def flag_text(flags: list[dict]) -> str:
    """flag_groups as plain text, for a route that shows no HTML (Gradescope's output)."""
    return "\n\n".join(heading + "\n" + "\n".join(f"- {kind}{' (' + where + ')' if where else ''}: {text}. {evidence}"
                                                  for kind, where, text, evidence in items)
                       for heading, items in flag_groups(flags))


class Verdict(_Worded):
    """How a grade id was judged; `text` is the class report's short word for it."""

    CORRECT = "correct", "full credit"
    PARTIAL = "partial", "partial"
    INCORRECT = "incorrect", "wrong"
    NOT_ATTEMPTED = "not attempted", "blank"

    @property
    def css(self) -> str:
        """The class a page styles it with."""
        return self.value.replace(" ", "-")


def shape_text(shape) -> str:
    """A tensor's shape as feedback writes it, the way Python writes a tuple: (32, 1), (64,), ()."""
    return str(tuple(shape))


def _uses(tensor: str, consumers: list[str]) -> str:
    names = [f"in {c}" for c in consumers]
    where = ", ".join(names[:-1]) + " and " + names[-1]
    count = {3: "three", 4: "four", 5: "five"}.get(len(names), str(len(names)))
    times, all_of = ("twice", "both") if len(names) == 2 else (f"{count} times", f"all {count}")
    return f"{tensor} is used {times} ({where}), so its gradient is the sum of {all_of}"


def missed_branch(tensor: str, consumers: list[str], missing: str) -> str:
    """The words for a gradient that leaves out one use of its tensor, one sentence for the rule table's
    slip and the search's candidate alike (a student meets it from either)."""
    return f"misses the branch through {missing}: {_uses(tensor, consumers)}"


def only_branch(tensor: str, consumers: list[str], kept: str) -> str:
    """The words for a gradient that keeps one use of its tensor of three or more (an accumulation that
    overwrites, a loop over one step)."""
    return f"keeps only the branch through {kept}: {_uses(tensor, consumers)}"


# Every slip of the rule table (grader/derive/rules.py) by its stable name, and the kind of classic mistake
# it is (feedback and the blind measurement of issue 25 count them by these). Here, where no rule is loaded:
# an exercise names the slips it accepts at load, in the student's package too.
TRANSPOSE, BROADCAST, KEEPDIM, DIMENSION, SIGN, FACTOR, BRANCH, FORWARD, INPUT, LOCAL_RULE = (
    "missing transpose or wrong operand order", "missing sum over a broadcast dimension", "lost keepdim",
    "wrong dimension", "sign", "a factor of a size", "a missed branch of a reused tensor",
    "the forward value used for the gradient", "a derivative written through the input instead of the output",
    "a slip in the local derivative")
SLIPS = {
    "matmul-transpose": TRANSPOSE, "matmul-order": TRANSPOSE, "transpose-missing": TRANSPOSE,
    "permute-same": TRANSPOSE,
    "broadcast-no-sum": BROADCAST, "broadcast-keepdim": KEEPDIM, "broadcast-wrong-dim": DIMENSION,
    "sign": SIGN, "sub-sign": SIGN, "neg-sign": SIGN, "where-swapped": SIGN,
    "mean-count": FACTOR, "sum-mean": FACTOR, "bessel": FACTOR, "ce-mean": FACTOR, "power-factor": FACTOR,
    "sqrt-factor": FACTOR,
    "missed-branch": BRANCH, "overwrite": BRANCH, "index-overwrite": BRANCH, "mask-forgotten": BRANCH,
    "forward-value": FORWARD,
    "tanh-input": INPUT, "sigmoid-input": INPUT, "exp-input": INPUT, "sqrt-input": INPUT, "log-output": INPUT,
    "mul-local": LOCAL_RULE, "mul-operand": LOCAL_RULE, "div-multiplies": LOCAL_RULE, "div-square": LOCAL_RULE,
    "power-exponent": LOCAL_RULE, "power-raised": LOCAL_RULE, "eps-dropped": LOCAL_RULE, "tanh-square": LOCAL_RULE,
    "tanh-no-square": LOCAL_RULE, "tanh-plus": LOCAL_RULE, "tanh-sigmoid": LOCAL_RULE, "sigmoid-half": LOCAL_RULE,
    "sigmoid-tanh": LOCAL_RULE, "relu-output": LOCAL_RULE, "relu-inverted": LOCAL_RULE,
    "log-multiplies": LOCAL_RULE, "gelu-one-term": LOCAL_RULE, "softmax-no-sum": LOCAL_RULE,
    "softmax-elementwise": LOCAL_RULE, "log-softmax-no-sum": LOCAL_RULE, "max-everywhere": LOCAL_RULE,
    "ce-one-hot": LOCAL_RULE,
}


# nbgrader keeps a score per grade cell: each grade id's is the self-check cell after its answer, so the
# gradebook holds a score per gradient. Its grade id is the answer's with this prefix, in every exercise.
GRADE_CELL_PREFIX = "check_"


def grade_cell_id(grade_id: str) -> str:
    return GRADE_CELL_PREFIX + grade_id
