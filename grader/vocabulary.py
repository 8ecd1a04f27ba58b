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

import re
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
    # A function's dict without the answer's key (`{"dC": ...}` for `{"C": ...}`): no answer there, and not blank
    UNRETURNED = "unreturned", ("{function} returns no '{variable}': the grader reads each gradient under its "
                                "parameter's name, and finds none for {variable}")
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
    NOT_ALLOWED = ("not-allowed", "an answer cell was not run: it uses math or Python answer cells may not (rewrite it "
                   "with what the notebook lists)", False)
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


def missed_factor(tensor: str, consumer: str, reads: int) -> str:
    """The words for a gradient that counts a tensor once in a step that reads it more often (`W * W`'s
    derivative taken as W, not 2 W)."""
    times = {2: "twice", 3: "three times"}.get(reads, f"{reads} times")
    return (f"counts {tensor} once in {consumer}, which reads it {times}: each read sends back its own term, and "
            f"they add up")


def in_place(variable: str, changed: list[str]) -> str:
    """An answer whose cell changed inputs it read in place (the sandbox saw them change)."""
    first = changed[0]
    return (f"your {variable}'s cell changes {' and '.join(changed)} in place (a name bound to {first}, then *=, += "
            f"or a method ending in _), so it computes from changed values: start from a copy ({first}.clone()) "
            f"or write a new tensor ({first} * ...)")


def only_branch(tensor: str, consumers: list[str], kept: str) -> str:
    """The words for a gradient that keeps one use of its tensor of three or more (an accumulation that
    overwrites, a loop over one step)."""
    return f"keeps only the branch through {kept}: {_uses(tensor, consumers)}"


# Every slip of the rule table (grader/derive/rules.py) by its stable name, and the kind of classic mistake
# it is (feedback and the blind measurement of issue 25 count them by these). Here, where no rule is loaded:
# an exercise names the slips it accepts at load, in the student's package too.
TRANSPOSE, BROADCAST, KEEPDIM, DIMENSION, SIGN, FACTOR, BRANCH, FORWARD, INPUT, LOCAL_RULE, PRECEDENCE = (
    "missing transpose or wrong operand order", "missing sum over a broadcast dimension", "lost keepdim",
    "wrong dimension", "sign", "a factor of a size", "a missed branch of a reused tensor",
    "the forward value used for the gradient", "a derivative written through the input instead of the output",
    "a slip in the local derivative", "operator precedence")
SLIPS = {
    "matmul-transpose": TRANSPOSE, "matmul-order": TRANSPOSE, "transpose-missing": TRANSPOSE,
    "permute-same": TRANSPOSE, "outer-of-sums": TRANSPOSE,
    "broadcast-no-sum": BROADCAST, "broadcast-keepdim": KEEPDIM, "broadcast-wrong-dim": DIMENSION,
    "sign": SIGN, "sub-sign": SIGN, "neg-sign": SIGN, "where-swapped": SIGN,
    "mean-count": FACTOR, "sum-mean": FACTOR, "bessel": FACTOR, "ce-mean": FACTOR, "power-factor": FACTOR,
    "sqrt-factor": FACTOR,
    "missed-branch": BRANCH, "missed-factor": BRANCH, "overwrite": BRANCH, "index-overwrite": BRANCH,
    "mask-forgotten": BRANCH,
    "forward-value": FORWARD,
    "tanh-input": INPUT, "sigmoid-input": INPUT, "exp-input": INPUT, "sqrt-input": INPUT, "log-output": INPUT,
    "mul-local": LOCAL_RULE, "mul-part": LOCAL_RULE,
    "mul-operand": LOCAL_RULE, "div-multiplies": LOCAL_RULE, "div-square": LOCAL_RULE,
    "power-exponent": LOCAL_RULE, "power-raised": LOCAL_RULE, "eps-dropped": LOCAL_RULE, "tanh-square": LOCAL_RULE,
    "tanh-no-square": LOCAL_RULE, "tanh-plus": LOCAL_RULE, "tanh-sigmoid": LOCAL_RULE, "sigmoid-half": LOCAL_RULE,
    "sigmoid-tanh": LOCAL_RULE, "tanh-twice": LOCAL_RULE, "sigmoid-twice": LOCAL_RULE,
    "relu-output": LOCAL_RULE, "relu-input": LOCAL_RULE, "relu-inverted": LOCAL_RULE,
    "log-multiplies": LOCAL_RULE, "gelu-one-term": LOCAL_RULE, "softmax-no-sum": LOCAL_RULE,
    "softmax-elementwise": LOCAL_RULE, "log-softmax-no-sum": LOCAL_RULE, "max-everywhere": LOCAL_RULE,
    "ce-one-hot": LOCAL_RULE, "square-factor": FACTOR, "square-output": INPUT, "abs-sign": SIGN,
    "rsqrt-sign": SIGN, "rsqrt-power": LOCAL_RULE, "silu-one-term": LOCAL_RULE, "softplus-exp": LOCAL_RULE,
    "softplus-output": INPUT, "clamp-output": LOCAL_RULE,
    "clamp-inverted": LOCAL_RULE, "maximum-both": LOCAL_RULE, "mse-factor": FACTOR, "mse-mean": FACTOR,
    "logsumexp-no-softmax": LOCAL_RULE, "norm-no-mean": LOCAL_RULE, "norm-no-projection": LOCAL_RULE,
    "einsum-operand": TRANSPOSE, "matmul-view": TRANSPOSE,
    **{f"{function}-{slip}": LOCAL_RULE for function in ("tanh", "sigmoid", "relu", "exp", "log", "sqrt", "square",
                                                         "abs", "rsqrt", "silu", "softplus")
       for slip in ("dropped", "neighbour", "applied")},
    "ce-softmax-dim": DIMENSION, "ce-log-softmax": LOCAL_RULE, "ce-target-set": LOCAL_RULE,
    "ce-smoothing-dropped": LOCAL_RULE, "ce-smoothing-spread": FACTOR,
    "precedence": PRECEDENCE, "regrouped": PRECEDENCE, "power-fraction": PRECEDENCE,
    "norm-bessel-inverted": FACTOR,
    "norm-product-of-sums": TRANSPOSE, "norm-sum-all": DIMENSION, "norm-last-example": BRANCH,
    "norm-dims": DIMENSION, "softmax-sum-dim": DIMENSION, "transpose-one-factor": TRANSPOSE,
    "ce-minus-one": LOCAL_RULE, "ce-unnormalized": LOCAL_RULE, "ce-target-undivided": FACTOR,
    "index-everywhere": BRANCH,
}


# nbgrader keeps a score per grade cell: each grade id's is the self-check cell after its answer, so the
# gradebook holds a score per gradient. Its grade id is the answer's with this prefix, in every exercise.
GRADE_CELL_PREFIX = "check_"


def grade_cell_id(grade_id: str) -> str:
    return GRADE_CELL_PREFIX + grade_id


# What a check cell says in a kernel where the setup has not run (a fresh one, or one just restarted).
SETUP_FIRST = "run the notebook's setup cells first (from the top: Run > Run All Above Selected Cell)"


# The families of feedback sentences, each worded here once: the shape hints (grader.judge.diagnose), the
# search of an answer's neighbourhood (grader.judge.neighbourhood) and the rule table's slips (grader.derive)
# name the same mistake from different evidence, and a student who meets it from two of them should read
# one account of it. A sentence that continues "your dX ..." starts with its verb.

class Transpose:
    """A gradient in the transposed layout, or a product whose operand needed its transpose."""

    OF_RIGHT = "is the transpose of the right gradient"
    # A product in the wrong order and a product right but transposed once too often are the same values:
    # the sentence says what both give, and both ways to it.
    ORDER = "is the transpose of the gradient, as from multiplying in the wrong order (or one transpose too many)"
    MISSING = "leaves the gradient in the output's layout: transpose it back"
    PERMUTE_SAME = "permutes the gradient with the forward's order instead of its inverse"
    PRODUCT_SHAPES = "the shapes of a matrix product do not fit (a transpose is probably missing or misplaced)"

    @staticmethod
    def looks(same: bool) -> str:
        """A 2-D answer of the reverse shape, or of the right square shape, whose transpose may be right."""
        return "looks transposed" + (": its transpose is the expected gradient" if same else
                                     " (the reverse of the expected shape): swap the operands or add .T")

    @staticmethod
    def swapped(a: int, b: int) -> str:
        return (f"is the right gradient with its dimensions {a} and {b} swapped, as a transpose does: a transpose "
                f"too many, or one left out")

    @staticmethod
    def swapped_shape(a: int, b: int) -> str:
        """`looks`, beyond two dimensions: said only where the transpose gives the expected gradient."""
        return f"looks transposed in dimensions {a} and {b}: its .transpose({a}, {b}) is the expected gradient"

    @staticmethod
    def viewed(operand: str) -> str:
        return (f"reshapes {operand} to its transpose's shape (view or reshape) where its transpose belongs: the shape "
                f"fits, but a view keeps the entries in memory order; only .T swaps rows and columns")

    @staticmethod
    def outer_of_sums(operand: str) -> str:
        return (f"multiplies the sum of {operand} over the examples by the sum of the gradient: a product of sums is "
                f"not the sum of each row's own product, which the matrix product {operand}.T @ gradient gives")

    @staticmethod
    def needs(operand: str) -> str:
        return f"multiplies by {operand} where the shape rule needs its transpose"

    SIZE_ONE_FACTOR = "a factor of a matrix product has a dimension of size 1 where the product needs more"

    @staticmethod
    def swapped_operand(dim: int, got: int, want: int) -> str:
        return (f"one operand has {got} entries along dimension {dim}, the gradient {want} (and {got} along the "
                "other): it is the gradient's shape reversed (a matrix product with its factors swapped, or a "
                "transpose missing or misplaced)")

    @staticmethod
    def size_one_factor(needed: int) -> str:
        return (f"one factor of a matrix product has a dimension of size 1 where the other has {needed}: a sum or a "
                "mean over that dimension taken where it does not belong? (no transpose makes these shapes fit)")

    @staticmethod
    def product_shapes(whose: str) -> str:
        return (f"the shapes of a matrix product do not fit: write the product whose shape is {whose} (a transpose "
                f"is probably missing or misplaced)")

    # Shapes that broadcast: @ where the elementwise * belongs fits as well as a transpose left out, so both
    # are said (a student trial's `torch.ones_like(counts) @ dcounts_sum` was told only of a transpose).
    PRODUCT_OR_ELEMENTWISE = ("the shapes of a matrix product do not fit, but they would broadcast: if this product is "
                              "elementwise, write * where @ is; if it is a matrix product, a transpose is missing or "
                              "misplaced")

    # Neutral on which way: a view where a permute belongs and a permute where a view belongs give the same
    # values (a blind answer that viewed, then transposed, was told to permute).
    REORDERED = ("has the right entries in the wrong places: it reads them in another order (a view or reshape keeps "
                 "the memory order, a transpose or permute moves entries: one of them is used where the other "
                 "belongs)")


def _dims(dims) -> str:
    return f"dimension {dims}" if isinstance(dims, int) else f"dimensions {dims}"


class Broadcast:
    """A tensor broadcast in the forward pass sums its gradient back over the broadcast dimensions, keeping
    its own shape: a sum left out, over the wrong dimension, without keepdim, or a mean in its place."""

    SQUEEZABLE = ("Partial credit: the values are right, but a gradient must have exactly its tensor's shape "
                  "(broadcasting would spread a wrong shape one step later)")
    @staticmethod
    def fitted_to(upstream: str, shapes: str = "") -> str:
        """For a cell that raised where the upstream gradient it reads has its values right in a shape a size-1
        dimension off: a third instructor trial's `dalpha.squeeze(2)` ran on the student's (n, T, 1) dalpha and
        raised "Dimension out of range" on the right (n, T) one, told nothing more."""
        return (f"; the grader runs this cell with the right {upstream}{shapes}, a dimension of 1 off from your "
                f"{upstream} (its own check says so): a cell fitted to your {upstream} fails on it; fix {upstream}'s "
                "shape, and this cell with it")

    # torch's "The size of tensor a (8) must match the size of tensor b (32) at non-singleton dimension 1": an
    # instructor trial's `dhp = hu * ds_pos` (ds_pos one entry per example) was told no more than that.
    ELEMENTWISE_SHAPES = ("the shapes of an elementwise operation do not line up: a vector lines up with a matrix's "
                          "last dimension, so one entry per row needs a column axis (v[:, None] or v.unsqueeze(1)); "
                          "a sum meant to broadcast back needs keepdim=True")

    @staticmethod
    def not_summed(dims, summed: bool) -> str:
        """`summed`: the sum gives the expected gradient. Else the shape says only that the answer has entries
        along dimensions the gradient has not: a sum left out is one account, a product of the wrong kind or
        another gradient read are others, so the sentence states what the values show."""
        if summed:
            return (f"not summed over {_dims(dims)}, along which this tensor was broadcast in the forward pass "
                    f"(summing it there gives the expected gradient)")
        return (f"has more than one entry along {_dims(dims)}, where the gradient has one; summed over it, its "
                f"values are still wrong: more than a missing sum is amiss")

    @staticmethod
    def left_broadcast(shape: str) -> str:
        return (f"broadcast to {shape} its values are right: a gradient has its tensor's full shape, not one "
                f"that broadcasts to it")

    @staticmethod
    def summed_everywhere(shape: str, over) -> str:
        return (f"a single number, summed over every dimension: a gradient of shape {shape} comes from a sum over "
                f"dimension {over} only (keepdim=True)")

    @staticmethod
    def wrong_dim_shape(shape: str, right: int, summed: int) -> str:
        return (f"summed over the wrong dimension: a gradient of shape {shape} comes from a sum over dimension "
                f"{right} (keepdim=True), not over dimension {summed}")

    @staticmethod
    def missing_keepdim(shape: str) -> str:
        return f"missing keepdim=True: a gradient has its tensor's shape, {shape}"

    @staticmethod
    def no_dimension(shape: str) -> str:
        return (f"a number with no dimension, where the gradient has shape {shape}: a sum over every dimension drops "
                f"them all; sum only over the dimensions its tensor was broadcast along (`.sum(0)` of an (n, 1) "
                f"gradient is (1,)), or reshape the result to {shape}")

    @staticmethod
    def extra_dim(shape: str) -> str:
        return f"an extra dimension of size 1: a gradient has its tensor's shape, {shape}"

    @staticmethod
    def moved_one(got: str, want: str, same: bool) -> str:
        # Wrong values said too: a trial's sum over the wrong dimension, told only the shape, was then transposed.
        return (f"has its size-1 dimension in the wrong place: shape {got} where the gradient has {want}"
                + ("; reshaped, its values are right" if same else
                   "; reshaped, its values are still wrong, so moving the dimension alone will not put it right"))

    @staticmethod
    def summed_unbroadcast(dim: int, shape: str) -> str:
        return (f"summed over dimension {dim}, along which this tensor was not broadcast: its gradient keeps every "
                f"entry there, shape {shape} (the expected gradient summed over dimension {dim} gives these values)")

    @staticmethod
    def full_shape(shape: str) -> str:
        return f"a gradient has exactly its tensor's shape, {shape}"

    @staticmethod
    def averaged(tensor: str) -> str:
        return f"averages over the dimension along which {tensor} was broadcast, where the gradient adds up"

    @staticmethod
    def wrong_dim(dim: int, tensor: str) -> str:
        return f"sums over the wrong dimension ({dim}): {tensor} was broadcast along another one"

    @staticmethod
    def partial_sum(dim: int, tensor: str, *broadcast: int) -> str:
        """A sum over one of the dimensions `tensor` was broadcast along alone: a sum left out over the others,
        not one over a wrong dimension."""
        listed = ", ".join(map(str, broadcast[:-1])) + f" and {broadcast[-1]}" if broadcast else ""
        return (f"sums over dimension {dim} alone: {tensor} was broadcast along dimensions {listed}, and its "
                f"gradient sums over all of them")

    @staticmethod
    def upstream_summed(step: str, dim: int) -> str:
        return (f"sums d{step} over dimension {dim} before passing it back: each entry of {step} sends back its "
                f"own gradient")

    @staticmethod
    def no_sum(what: str, shape: str) -> str:
        return f"leaves out the sum over the dimension {what} {shape} was broadcast along"

    @staticmethod
    def sums_over(over: str, what: str, along: str) -> str:
        return f"sums over {over} where {what} was broadcast over {along}"

    @staticmethod
    def lost_keepdim(what: str, shape: str) -> str:
        return f"sums without keepdim=True, which loses {what}'s shape {shape}"


class Sign:
    FLIPPED = "has its sign flipped"

    @staticmethod
    def and_(rest: str) -> str:
        return f"{Sign.FLIPPED} and {rest}"


class Zeros:
    """Told as a fact: an answer of zeros fits any cause whose values are zero too."""

    CANDIDATE = "is all zeros"
    HINT = "all zeros"


class Chain:
    """A step of the chain rule left out, or applied where it does not belong."""

    @staticmethod
    def skips(named: str, read: bool = False) -> str:
        """An answer right with the loss's own upstream gradients, wrong with others: it skips `named`, or, where
        its code does `read` them, uses them in a way only the loss's own values make right (a trial's sum over
        the wrong dimension, then transposed, of an upstream gradient symmetric by the data's construction)."""
        if read:
            return (f"right value for this loss, but not this step of the chain rule: it reads {named}, but its "
                    f"result is right only with this loss's own values of {named}, whose pattern (zeros, ones, a "
                    f"symmetry) hides a mistake in how it uses them; with other values of {named} it gives a "
                    f"different result.")
        return (f"right value for this loss, but not this step of the chain rule: it skips {named}, so with other "
                f"values of {named} it gives a different result; compute it from {named} as the chain rule does.")

    @staticmethod
    def skips_some(skipped: str, read: str, steps: str) -> str:
        """An answer that reads some of its upstream gradients (`read`) and puts the loss's own values in for the
        others (`skipped`, flowing back through `steps`): a closed form for one use of its tensor, right for this
        loss, wrong with other upstream gradients."""
        return (f"reads {read} but not {skipped}: it computes the part flowing back through {steps} from this "
                f"loss's own values, so with other values of {skipped} it gives a different result; compute that "
                f"part from {skipped} as the chain rule does")

    @staticmethod
    def local_only(step: str) -> str:
        return (f"the local derivative through {step} is not multiplied by d{step}, the gradient flowing back from "
                f"it (chain rule)")

    @staticmethod
    def upstream_only(step: str, alone: bool) -> str:
        """`alone`: the step is the tensor's one use, so the answer is d{step} itself: a local derivative left
        out and the next cell's formula copied give those values alike, so the sentence says what they are."""
        if alone:
            return (f"equals d{step}: the derivative of the step that computes {step} is not applied to it (left "
                    f"out, or the formula of d{step} copied)")
        return f"passes d{step} back unchanged: the local derivative of the step that computes {step} is missing"

    @staticmethod
    def upstream_negated(step: str) -> str:
        """-d{step}: of a subtraction's derivative, its minus sign alone (an instructor trial's hinge,
        `dneg_d = -dviol`, the mask left out)."""
        return (f"passes -d{step} back: of the derivative of the step that computes {step}, only its minus sign is "
                f"applied, the rest of it is left out")

    @staticmethod
    def too_early(source: str, before: str) -> str:
        return (f"goes one step too far: it also applies the derivative of the step that computes {source} from "
                f"{before}, which belongs in d{before}")

    @staticmethod
    def forward_applied(step: str) -> str:
        return (f"applies the operation that computes {step} to d{step}, where it must multiply d{step} by that "
                f"operation's derivative")

    @staticmethod
    def dropped(what: str, output: str) -> str:
        """A factor of a line's chain left out: the line does more than this one operation (tanh of a sum of
        products), so the answer is no upstream gradient copied, and the sentence names the factor."""
        return f"leaves out {what} on the way back through {output}: the chain rule multiplies by it there"

    @staticmethod
    def every_use(sentence: str, tensor: str, *, consumers: list[str] | None = None) -> str:
        """A slip of one use of a tensor made in each of its uses (`consumers`: in each of those alone, where
        the others have no such step: a GRU's candidates, not its gates)."""
        listed = ", ".join(consumers[:-1]) + " and " + consumers[-1] if consumers and len(consumers) > 1 else \
            "".join(consumers or ())
        where = f"every use of {tensor}" if consumers is None else f"{tensor}'s uses in {listed}"
        return f"{sentence} (the same slip in {where})"

    @staticmethod
    def inner_sign(called: str, inner: str) -> str:
        """A function of a negated input differentiated as the function of the input itself."""
        return (f"takes the derivative of {called} at {inner}, where the step applies {called} to -{inner}: take it "
                f"at -{inner}, and the minus inside multiplies it by -1 (chain rule)")

    @staticmethod
    def read_at(other: str, what: str, role: str) -> str:
        """A derivative read at another tensor of the same shape (a time step's or a gate's neighbour)."""
        return f"uses {other} where {what} needs {role}"

    @staticmethod
    def reads_instead(read: str, needed: str) -> str:
        """Names the cell's code reads in place of those the derivative needs (each a name, or several in the same
        order), said only where the values confirm it (the right cell reading them instead gives the answer)."""
        return f"reads {read} where the derivative needs {needed}"

    @staticmethod
    def forward_value(consumer: str, upstream: str) -> str:
        return f"uses {consumer}, the forward value, where the upstream gradient {upstream} is needed"


class Loops:
    """A loop in the cell, told by what it leaves in the values."""

    LAST_EXAMPLE = ("is the last example's part alone, where the gradient sums the parts of every example of the "
                    "batch: as a loop over the examples that assigns with = (each pass overwrites the one before; "
                    "+= adds them up)")


class Precedence:
    """A derived line written with its parentheses left out, or its products grouped the other way: Python
    reads the same symbols as another computation."""

    NAMES = {"+": "sum", "-": "difference", "*": "product", "/": "quotient", "@": "matrix product", "**": "power"}

    @staticmethod
    def dropped(first: str, then: str) -> str:
        return (f"leaves out the parentheses around a {Precedence.NAMES[then]}: Python computes {first} before "
                f"{then} (operator precedence)")

    @staticmethod
    def regrouped(first: str, then: str) -> str:
        return (f"groups {first} and {then} the other way: an elementwise product and a matrix product do not "
                f"commute, so each factor must be applied where the chain rule puts it")


def factors(sizes, words, shown=None) -> tuple[tuple[str, float, str], ...]:
    """The scale-factor family: (key, factor, what an answer that many times the right one does), for the
    network's sizes (`words` says what each is; `shown`, how the notebook says one it binds no name for)."""
    def per_size(make):
        return [entry for name, value in sizes.items() if value > 1 for entry in make(name, value)]

    def say(size: str) -> str:
        return (shown or {}).get(size, size)

    def scaled(s, v):
        what, d = (f" ({s} is {words[s]})" if s in words else ""), say(s)
        return (
            (s, v, f"is {d} times too large{what}"),
            (f"1/{s}", 1 / v, f"is {d} times too small{what}"),
            (f"{s}-1", v - 1, f"is {d}-1 times too large{what}"),
            (f"1/({s}-1)", 1 / (v - 1), f"is {d}-1 times too small{what}"),
            (f"{s}/({s}-1)", v / (v - 1), f"is {d}/({d}-1) times the right value: it divides by {d}-1 where the "
                                         f"forward divides by {d}"),
            (f"({s}-1)/{s}", (v - 1) / v, f"is ({d}-1)/{d} times the right value: it divides by {d} where the "
                                         f"forward divides by {d}-1 (the unbiased variance, Bessel's correction)"),
        )

    def fraction(s, v):  # a hyperparameter below one: a temperature's tau, a weight's lam
        what, d = (f" ({s} is {words[s]})" if s in words else ""), say(s)
        return ((s, v, f"is {d} times the right value: a division by {d} left out, or a multiplication too many"
                       f"{what}"),
                (f"1/{s}", 1 / v, f"is 1/{d} times the right value: a division by {d} too many, or a multiplication "
                                  f"left out{what}"))

    def ratio(s, v):
        return tuple((f"{s}/{t}", v / w, f"is {say(s)}/{say(t)} times the right value, as when it divides by "
                                         f"{say(t)} where {say(s)} belongs")
                     for t, w in sizes.items() if w > 1 and t != s)

    def flipped(s, v):
        return ((f"-{s}", -v, Sign.and_(f"is {say(s)} times too large")),
                (f"-1/{s}", -1 / v, Sign.and_(f"is {say(s)} times too small")))

    return (
        ("sign", -1.0, Sign.FLIPPED),
        *per_size(scaled),
        # A hyperparameter of 0.5 is named before a square's factor 2: the exercise's own word for the factor.
        *(entry for name, value in sizes.items() if isinstance(value, float) and 0 < value < 1
          for entry in fraction(name, value)),
        ("2", 2.0, "is twice the right value (a factor 2 too many, as from a square's derivative)"),
        ("1/2", 0.5, "is half the right value (a factor 2 missing, as from a square's derivative)"),
        *per_size(flipped),
        *per_size(ratio),
        ("-2", -2.0, Sign.and_("is twice too large")),
        ("-1/2", -0.5, Sign.and_("is half the right value")),
    )


def constant_multiple(factor: float | None) -> str:
    """An answer `factor` times the right one on every configuration; None: the factor is not given (the
    configurations it was seen on are hidden)."""
    times = "a constant multiple of the right value" if factor is None else f"{factor:.6g} times the right value"
    return f"is {times} on every configuration"


def dtype_note(error: str, function: str) -> str:
    """Where a function fails on mixed dtypes (an error that names them): the self-check and the grader call it
    with float64 tensors, which the notebook's own float32 run never showed. Said by the grader too, a hidden
    configuration's message withheld: it names no size."""
    if not re.search(r"\b(Double|Float|dtype|scalar type)\b", error):
        return ""
    return (f" ({function} is called with float64 tensors here and by the grader: a tensor it makes with a fixed "
            "dtype (torch.zeros(shape) is float32; torch.zeros_like(x) follows x) or keeps from an earlier call "
            "does not match them)")
