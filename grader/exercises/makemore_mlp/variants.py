"""Variants of the makemore MLP, so that a course can grade an exercise whose answers are not on the
internet: every network here is composed from small pieces (an activation, a normalization, and
optionally a residual block), and each variant is a full `Exercise` whose true gradients come from the
same autograd oracle as the lecture's.

A variant's name is `<activation>-<normalization>[-residual]` (`relu-layernorm`,
`gelu-none-residual`); `makemore-mlp/<name>` loads it. `tanh-batchnorm` is the lecture's network and
loads as the lecture's own exercise (tests prove that composing its pieces gives exactly it).

The structural change is a residual block after the hidden layer, `hres = h + act(h @ W3 + b3)`, not a
second hidden layer: a second layer would repeat the normalization block the student has just done (nine
more answers of the same kind), while the residual block teaches the one thing the lecture's network
does not: a tensor (`h`) whose gradient is the sum of two paths, the skip and the branch. It keeps every
size the lecture has (W3 is square), so the hidden configurations' ranges stay as they are.
"""
from __future__ import annotations

import functools
import hashlib
import math
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from grader.authoring import define
from grader.exercise import (
    FUSED,
    Answer,
    Exercise,
)
from grader.exercises.makemore_mlp import EXERCISE, lecture, mistakes

LECTURE_VARIANT = "tanh-batchnorm"
# Composes a variant's notebook source from the lecture's (grader/exercise.py's FAMILIES says why by name).
NOTEBOOK_SOURCE = "grader.exercises.makemore_mlp.notebook_source"
_LECTURE_STEP = EXERCISE.network.step
_ATOMIC = EXERCISE.atomic


def rename(text: str, names: dict[str, str]) -> str:
    """`text` with every identifier in `names`, and its gradient `d<name>`, renamed: a piece written for
    the hidden layer (`h = act(hpreact)`) reused for the residual branch (`r = act(rpreact)`)."""
    if not names:
        return text
    pattern = re.compile(r"\b(d?)(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")\b")
    return pattern.sub(lambda m: m.group(1) + names[m.group(2)], text)


@dataclass(frozen=True)
class Activation:
    """`y = act(x)` in atomic lines; `temps` are its named intermediates (templates on `{y}`), in forward
    order, `gain` is the init's gain for the layer that feeds it (the lecture's 5/3 for tanh), and
    `student` what changes for the student against the lecture (nothing, for tanh)."""

    name: str
    lines: str
    temps: tuple[str, ...]
    gain: float
    student: str

    def forward(self, x: str, y: str) -> str:
        return self.lines.format(x=x, y=y)

    def names(self, y: str) -> tuple[str, ...]:
        """Every name the activation defines, in forward order (its output last)."""
        return (*(t.format(y=y) for t in self.temps), y)

    def order(self, x: str, y: str) -> tuple[str, ...]:
        """Its gradients from its output back to its input, as the notebook asks for them."""
        return tuple("d" + t for t in reversed(self.names(y)[:-1])) + ("d" + x,)


# GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), one operation per line.
GELU_C = math.sqrt(2 / math.pi)
ACTIVATIONS = {a.name: a for a in (
    Activation("tanh", f"{{y}} = {_LECTURE_STEP['h'].code.replace('hpreact', '{x}')}\n", (), 5 / 3, ""),
    Activation("relu", "{y} = torch.relu({x})\n", (), math.sqrt(2),
               "ReLU: its derivative is a mask (1 where its input is positive, 0 elsewhere, 0 at 0)"),
    Activation("sigmoid", "{y} = torch.sigmoid({x})\n", (), 1.0,
               "sigmoid: its derivative is σ(1 - σ), written with its output h as h(1 - h)"),
    Activation("gelu", "{y}cube = {x}**3\n"
               f"{{y}}inner = {GELU_C!r} * ({{x}} + 0.044715 * {{y}}cube)\n"
               "{y}tanh = torch.tanh({y}inner)\n"
               "{y} = 0.5 * {x} * (1 + {y}tanh)\n",
               ("{y}cube", "{y}inner", "{y}tanh"), math.sqrt(2),
               "GELU (tanh approximation) in four steps, its input used three times"),
)}


@dataclass(frozen=True)
class Normalization:
    """The block between the first linear layer (output `pre`) and `hpreact`: its lines, parameters (a
    gain and a bias, drawn nonzero), its gradients in notebook order, the forward values its fused
    backward reads from the cache, which init parameters the tiny-variance configuration scales, and what
    changes for the student against the lecture (nothing, for batch norm)."""

    name: str
    pre: str
    lines: str
    parameters: tuple[str, ...]
    order: tuple[str, ...]
    cache: tuple[str, ...]
    scaled: tuple[str, ...]
    student: str

    @property
    def title(self) -> str:
        """What feedback calls the block: "the batch-norm step"."""
        return self.name.replace("norm", "-norm")

    @property
    def fused(self) -> Answer | None:
        """Exercise 3, the whole block's backward in one cell, from dhpreact."""
        if not self.parameters:
            return None
        return Answer("ex3_d" + self.pre, "d" + self.pre, self.pre, FUSED, 3, ("dhpreact",), ("dhpreact",),
                      sink="hpreact", title=f"the {self.title} step")


_BATCHNORM = ("bnmeani", "bndiff", "bndiff2", "bnvar", "bnvar_inv", "bnraw", "hpreact")
NORMALIZATIONS = {n.name: n for n in (
    Normalization("batchnorm", "hprebn", "".join(f"{s} = {_LECTURE_STEP[s].code}\n" for s in _BATCHNORM),
                  ("bngain", "bnbias"),
                  _ATOMIC[_ATOMIC.index("dbngain"):_ATOMIC.index("dembcat")],
                  ("hprebn", "bnmeani", "bnvar", "bnvar_inv", "bnraw"), ("W1",), ""),
    # Layer norm: the same seven lines with the statistics of each example over its features (dim 1), and
    # the biased variance, as torch.nn.LayerNorm. Its tiny-variance configuration scales b1 too: b1 varies
    # across features, so it alone would keep each row's variance far above eps.
    Normalization("layernorm", "hpreln",
                  "lnmean = hpreln.mean(1, keepdim=True)\n"
                  "lndiff = hpreln - lnmean\n"
                  "lndiff2 = lndiff**2\n"
                  "lnvar = lndiff2.mean(1, keepdim=True)\n"
                  "lnvar_inv = (lnvar + 1e-5) ** -0.5\n"
                  "lnraw = lndiff * lnvar_inv\n"
                  "hpreact = lngain * lnraw + lnbias\n",
                  ("lngain", "lnbias"),
                  ("dlngain", "dlnbias", "dlnraw", "dlnvar_inv", "dlnvar", "dlndiff2", "dlndiff", "dlnmean",
                   "dhpreln"),
                  ("hpreln", "lnmean", "lnvar", "lnvar_inv", "lnraw"), ("W1", "b1"),
                  "layer norm: statistics per example over features (dim 1), biased variance"),
    Normalization("none", "hpreact", "", (), (), (), (),
                  "no normalization: the linear layer feeds the activation (no exercise 3)"),
)}

RESIDUAL = "residual"
_STRUCTURE_STUDENT = "residual block hres = h + act(h @ W3 + b3): h's gradient sums two paths"


@dataclass(frozen=True)
class Variant:
    activation: Activation
    norm: Normalization
    residual: bool

    @property
    def name(self) -> str:
        return f"{self.activation.name}-{self.norm.name}" + ("-" + RESIDUAL if self.residual else "")

    @property
    def feature(self) -> str:
        """What the output layer reads."""
        return "hres" if self.residual else "h"

    @property
    def branch(self) -> dict[str, str]:
        """The hidden layer's activation names -> the residual branch's."""
        a = self.activation
        return dict(zip(("hpreact", *a.names("h")), ("rpreact", *a.names("r")), strict=True))

    @property
    def parameters(self) -> tuple[str, ...]:
        return (*EXERCISE.network.parameters[:5], *self.norm.parameters, *(("W3", "b3") if self.residual else ()))

    def forward(self) -> str:
        lecture = "".join(f"{s.name} = {s.code}\n" for s in EXERCISE.network.steps)
        head = rename(lecture[lecture.index("logits = "):], {"h": self.feature})
        lines = lecture[:lecture.index("hprebn = ")] + f"{self.norm.pre} = {_LECTURE_STEP['hprebn'].code}\n"
        lines += self.norm.lines
        lines += self.activation.forward("hpreact", "h")
        if self.residual:
            lines += "rpreact = h @ W3 + b3\n" + self.activation.forward("rpreact", "r") + "hres = h + r\n"
        return lines + head

    def atomic(self) -> tuple[str, ...]:
        """From dlogprobs back to dC: each piece's gradients, pieces in backward order."""
        head = tuple("d" + self.feature if g == "dh" else g for g in _ATOMIC[:_ATOMIC.index("db2") + 1])
        residual = ()
        if self.residual:
            residual = ("dr", *self.activation.order("rpreact", "r"), "dh", "dW3", "db3")
        return (*head, *residual, *self.activation.order("hpreact", "h"), *self.norm.order,
                *_ATOMIC[_ATOMIC.index("dembcat"):])

    def cache(self) -> tuple[str, ...]:
        """The forward values manual_backward is given: what its formulas read."""
        residual = ("rpreact", *self.activation.names("r"), "hres") if self.residual else ()
        return ("Xb", "emb", "embcat", *self.norm.cache, "hpreact", *self.activation.names("h"),
                *residual, "logits")

    def describe(self) -> str:
        """What differs from the lecture's network, piece by piece."""
        parts = (self.activation.student, self.norm.student, _STRUCTURE_STUDENT if self.residual else "")
        return "; ".join(p for p in parts if p)


def parse(name: str) -> Variant:
    """`relu-layernorm` -> its pieces; ValueError naming the known ones otherwise."""
    parts = name.split("-")
    residual = len(parts) == 3 and parts[2] == RESIDUAL
    if len(parts) not in (2, 3) or (len(parts) == 3 and not residual) or parts[0] not in ACTIVATIONS \
            or parts[1] not in NORMALIZATIONS:
        raise ValueError(f"unknown variant {name!r}: <activation>-<normalization>[-{RESIDUAL}], activation "
                         f"{' | '.join(ACTIVATIONS)}, normalization {' | '.join(NORMALIZATIONS)}")
    return Variant(ACTIVATIONS[parts[0]], NORMALIZATIONS[parts[1]], residual)


NAMES = tuple(Variant(a, n, r).name for r in (False, True) for n in NORMALIZATIONS.values()
              for a in ACTIVATIONS.values())


def parameters(variant: Variant) -> str:
    """The variant's parameter lines: the lecture's init for every piece, deliberately nonzero (a gain of
    exactly 1 or a zero W2 would hide wrong gradients), in the lecture's order (so `tanh-batchnorm` draws
    exactly the lecture's parameters), then the normalization's and the residual block's."""
    gain = variant.activation.gain
    lines = ["C = randn(vocab, n_embd)",
             f"W1 = randn(block_size * n_embd, n_hidden) * {gain!r} / math.sqrt(block_size * n_embd)",
             "b1 = randn(n_hidden) * 0.1", "W2 = randn(n_hidden, vocab) * 0.1", "b2 = randn(vocab) * 0.1"]
    if variant.norm.parameters:
        norm_gain, bias = variant.norm.parameters
        lines += [f"{norm_gain} = randn(1, n_hidden) * 0.1 + 1.0", f"{bias} = randn(1, n_hidden) * 0.1"]
    if variant.residual:  # half the hidden layer's gain: the branch adds to h rather than replacing it
        lines += [f"W3 = randn(n_hidden, n_hidden) * {gain!r} / math.sqrt(n_hidden) * 0.5",
                  "b3 = randn(n_hidden) * 0.1"]
    return "\n".join(lines)


def definition(name: str) -> dict:
    """The variant `name` composed from its pieces into the short form's arguments, as the lecture's file
    writes them. Its tiny variance scales the layer before the normalization (W1 under batch norm, W1 and
    b1 under layer norm, nothing without one); its grade ids keep the lecture's numbering (manual_backward
    is exercise 4 even with no exercise 3). `mistakes` names its catalogue's arguments (mistakes.for_variant)."""
    variant = parse(name)
    fused = {"dlogits": ("loss", "the cross-entropy step")}
    if variant.norm.parameters:
        fused["d" + variant.norm.pre] = ("hpreact", f"the {variant.norm.title} step")
    return {
        "name": f"{EXERCISE.name}/{name}",
        "title": f"{EXERCISE.title} ({name})",
        "sizes": {k: (v, EXERCISE.ranges[k]) for k, v in EXERCISE.lecture.items()},
        "parameters": parameters(variant),
        "data": lecture.DATA,
        "forward": variant.forward(),
        "order": " ".join(variant.atomic()),
        "fused": fused,
        "backward": " ".join(variant.cache()),
        "training": lecture.TRAINING,
        "backward_part": 4,
        "hidden": {"first": lecture.FIRST, "last": dict.fromkeys(variant.norm.scaled, lecture.TINY)},
        "parts": {2: EXERCISE.parts[2].partition(": ")[2],
                  **({3: f"{variant.norm.title.replace('-', ' ')} in one step"} if variant.norm.parameters else {})},
        "assignment": EXERCISE.assignment,
        "mistakes": (variant.activation.name, variant.norm.name, ("h", "r") if variant.residual else ("h",)),
    }


def build(name: str) -> Exercise:
    """The variant `name`, defined by the short form (for `tanh-batchnorm` too: tests compare it with the
    lecture's exercise)."""
    arguments = definition(name)
    return define.exercise(**{**arguments, "mistakes": mistakes.for_variant(*arguments["mistakes"])})


def exercise_file(name: str) -> str:
    """The variant as an exercise file of one's own (`backprop-ninja variants NAME`): a start for an
    instructor's network, which `course init --exercise` grades exactly as the variant."""
    lines = [f'"""{EXERCISE.title} ({name}):\na variant written out as an exercise file of its own."""',
             "from grader.authoring.define import exercise",
             "from grader.exercises.makemore_mlp.mistakes import for_variant",
             "", "EXERCISE = exercise("]
    for key, value in definition(name).items():
        if key == "name":
            text = repr(name)
        elif key == "mistakes":
            text = f"for_variant{value!r}"
        elif key in ("order", "backward"):
            text = '"""' + textwrap.fill(value, 100, subsequent_indent=" " * 12) + '"""'
        elif isinstance(value, str) and "\n" in value.strip():
            text = '"""\n' + textwrap.indent(textwrap.dedent(value).strip("\n"), " " * 8) + '\n    """'
        else:
            text = repr(value)
        lines.append(f"    {key}={text},")
    return "\n".join([*lines, ")"]) + "\n"


@functools.cache
@functools.cache
def variant(name: str) -> Exercise:
    """The exercise `makemore-mlp/<name>` loads: the lecture's own for its network, built otherwise; one
    object per name in a process, so that what is derived of it once (grader.derive) serves every caller."""
    return EXERCISE if name == LECTURE_VARIANT else build(name)


def from_salt(salt: str) -> str:
    """A variant drawn from a course's secret salt: the same salt always gives the same one, and different
    salts spread over every variant but the lecture's (whose answers are the ones on the internet). The
    salt is hashed with a label of its own, so the draw says nothing of the salt's other uses."""
    drawn = [n for n in NAMES if n != LECTURE_VARIANT]
    digest = hashlib.sha256(f"makemore-mlp variant\0{salt}".encode()).digest()
    return drawn[int.from_bytes(digest[:8], "big") % len(drawn)]


def describe(name: str) -> str:
    """What changes for the student in `name`, against the lecture."""
    if name == LECTURE_VARIANT:
        return "the lecture's own network, exercise and answers (which are on the internet)"
    exercise = variant(name)
    fused = len([a for a in exercise.answers if a.kind == FUSED])
    return f"{parse(name).describe()} ({len(exercise.atomic)} gradients, {fused} fused)"


PROSE_FILE = Path(__file__).with_name("variant_prose.md")
_SECTION = re.compile(r"^<!-- (\S+:\S+) -->$", re.MULTILINE)


@functools.cache
def _prose() -> dict[str, str]:
    parts = _SECTION.split(PROSE_FILE.read_text(encoding="utf-8"))
    return {key: body.strip() + "\n" for key, body in zip(parts[1::2], parts[2::2], strict=True)}


def prose(name: str) -> dict[str, str]:
    """The students' notebook's text where variant `name` differs from the lecture's, by place: `1b` (the
    activation's bullet, and the residual block's), `1c` (the normalization group), `1d` (the bullet
    about db1), `ex3` (exercise 3's introduction) and `ex4` (what follows training). An empty text
    means the lecture's has no counterpart (no normalization: no group 1c, no exercise 3); a place not
    named keeps the lecture's text."""
    v = parse(name)
    text = _prose()
    out = {}
    if v.activation.student or v.residual:
        bullets = [text.get(f"1b:{v.activation.name}", ""), text["1b:residual"] if v.residual else ""]
        out["1b"] = "".join(bullets)
    if v.norm.student:
        for place in ("1c", "1d", "ex3", "ex4"):
            out[place] = text.get(f"{place}:{v.norm.name}", "")
    return out


def groups(name: str) -> tuple[str, ...]:
    """The last grade id of each group of exercise 1 (1a the loss to the logits, 1b the output layer and
    the activation, 1c the normalization, 1d the first layer and the embedding)."""
    v = parse(name)
    return ("dlogits", "dhpreact", *(("d" + v.norm.pre,) if v.norm.parameters else ()), "dC")
