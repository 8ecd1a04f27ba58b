"""The words the grader's stages pass to each other and show people, each defined once with its text.

- Status: what an answer cell produced on one configuration, as the sandboxed child reports it.
- Match: how a tensor it produced compares with the expected one there.
- Flag: an integrity flag, something an instructor should look at whatever it scored.
- Verdict: how one grade id of a submission was judged, as results files store it.

Each is a `StrEnum`, so a member equals its string: the wire format and the results JSON carry plain
strings, and a file written before these existed reads the same. A leaf module: the sandbox, the
judge and the outputs all import it, and it imports nothing of theirs.
"""
from __future__ import annotations

from enum import StrEnum


class _Worded(StrEnum):
    """A member with its student-facing text beside its value."""

    def __new__(cls, value: str, text: str | None = None):
        member = str.__new__(cls, value)
        member._value_ = value
        member.text = text
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
    """An integrity flag's kind; `text` is what the student's feedback page says of it. A result's
    flags are JSON objects {"kind": ..., "evidence": ..., and where: "grade_id", "check" or "cell"}."""

    STATIC_CHECK = "static-check", "an answer cell was not run: the static check refused it"
    FORGED_OUTPUT = "forged-output", "an answer cell prints what looks like a grading result (it changes no score)"
    AUTOGRAD = "autograd", "autograd was used at run time"
    FORBIDDEN_CALL = "forbidden-call", "an answer cell did what no answer needs and the grader forbids"
    TIMEOUT = "timeout", "a cell ran past its time limit"
    MEMORY = "memory", "a cell ran into the sandbox's memory limit"
    CRASHED = "crashed", "a cell stopped the grading process (it was skipped, the rest graded)"
    SANDBOX = "sandbox", "the grading process stopped"
    GRADER_ERROR = ("grader-error",
                    "the grader itself failed on a test (not your fault: your instructor will look at it)")

    @classmethod
    def text_of(cls, kind: str) -> str:
        """The text for a kind read from a results file, which may name one this version does not know."""
        return cls(kind).text if kind in cls._value2member_map_ else "flagged for your instructor"


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
