"""A makemore variant's notebook source: the lecture's prose source with the variant's sections in place of
the lecture's, so that 24 notebooks come from one lecture text and one text of differences, never from
copies of the lecture. Part of the package, so that `course init --variant` writes a variant's notebooks
from a wheel: grader/lms/course_init.py builds them from this text and the reference answers the rule
table derives from the variant's forward lines (grader/authoring/skeleton.py), so nothing here is an answer.

The lecture's source (notebook/backprop_ninja.py) marks its replaceable sections with empty raw cells
`begin="NAME"` / `end="NAME"`; notebook/backprop_ninja_variant.py writes each section's variant text once
for every variant, with `{{key}}` where the variant's own words go. This module decides per variant which
sections change (a ReLU variant keeps the lecture's batch-norm group, a layer-norm one its tanh bullet),
and fills the keys from the variant's pieces (its network, answer cells, init, fused forward, and the
piece texts of variant_prose.md). It imports nothing of the engine's notebook builder or of the rule
table: the student package, which carries the exercise's modules, never holds either.
"""
from __future__ import annotations

import functools
import re
import textwrap
from pathlib import Path

from grader.exercise import load
from grader.exercises.makemore_mlp.variants import LECTURE_VARIANT, Variant, parse, prose

PROSE = Path(__file__).resolve().with_name("notebook") / "backprop_ninja.py"
VARIANT_PROSE = PROSE.with_name("backprop_ninja_variant.py")
_BEGIN = re.compile(r'^# %% \[raw\] begin="(\w+)"\n(.*?)^# %% \[raw\] end="\1"\n\n?', re.MULTILINE | re.DOTALL)
_SECTION = re.compile(r'^# %% \[raw\] section="(\w+)"\n', re.MULTILINE)
_KEY = re.compile(r"\{\{(\w+)\}\}")


class SourceError(ValueError):
    """The lecture's source and the variant's sections no longer fit together; the message names the file."""

# How the notebook calls each piece.
ACTIVATION_WORDS = {"tanh": "tanh", "relu": "ReLU", "sigmoid": "the sigmoid", "gelu": "GELU (its tanh approximation)"}
GAIN_WORDS = {"tanh": "5/3", "relu": "√2", "sigmoid": "1", "gelu": "√2"}
GAIN_CODE = {"tanh": "(5 / 3)", "relu": "2**0.5", "sigmoid": "1.0", "gelu": "2**0.5"}
NORM_WORDS = {"batchnorm": "batch normalization", "layernorm": "layer normalization"}
NORM_HEADER = {"batchnorm": "BatchNorm layer", "layernorm": "LayerNorm layer: each example over its features"}
NORM_SENTENCE = {
    "batchnorm": " Batch normalization uses the *unbiased* variance (it divides by $n-1$, Bessel's correction), "
                 "as the lecture does, and `1e-5` is its $\\epsilon$.",
    "layernorm": " Layer normalization normalizes each example over its features with the *biased* variance "
                 "(it divides by the number of features, as `torch.nn.LayerNorm` does), and `1e-5` is its "
                 "$\\epsilon$.",
    "none": "",
}
COUNT_WORDS = {5: "five", 7: "seven", 9: "nine"}

# Where the lecture's text needs only a few words of the variant's (its parameters, or no batch norm),
# the variant edits it: (lecture text, variant text), each found exactly once (a change to the lecture's
# wording that breaks one fails the build).
EDITS = {
    "init": (("The lecture's initialization: small random values",
              "Small random values drawn in the grader's order"),
             ('        "C": randn(vocab_size, n_embd),\n'
              '        "W1": randn(fan_in, n_hidden) * (5 / 3) / fan_in**0.5,  # Kaiming init for tanh\n'
              '        "b1": randn(n_hidden) * 0.1,  # useless under batch norm, but it has a gradient to find\n'
              '        "W2": randn(n_hidden, vocab_size) * 0.1,\n'
              '        "b2": randn(vocab_size) * 0.1,\n'
              '        "bngain": randn(1, n_hidden) * 0.1 + 1.0,\n'
              '        "bnbias": randn(1, n_hidden) * 0.1,\n', "{{init}}\n"),
             ("C, W1, b1, W2, b2, bngain, bnbias = init", "{{parameters}} = init"),
             ("parameters = [C, W1, b1, W2, b2, bngain, bnbias]", "parameters = [{{parameters}}]")),
    "1d": (("# - Batch normalization subtracts each column's mean, so adding a constant to a column of\n"
            "#   `hprebn` (which is what `b1` does) changes nothing downstream: `db1` is zero in exact\n"
            "#   arithmetic. As with `dlogit_maxes`, compute it by the chain rule anyway.\n", "{{1d}}\n"),),
    "evaluate": (("fused_forward(params, X, Y, bnstats)", "fused_forward(params, X, Y)"),
                 ("fused_forward(params, torch.tensor([context]), bnstats=bnstats)",
                  "fused_forward(params, torch.tensor([context]))")),
    "takeaway": (("- Fused gradients (cross-entropy, batch normalization) are shorter",
                  "- Fused gradients ({{fused_words}}) are shorter"),
                 ("#   the model gets most wrong stop teaching it anything. And batch normalization must use the\n"
                  "#   same variance (biased or unbiased) in training and at inference.\n",
                  "#   the model gets most wrong stop teaching it anything.\n")),
}


def _md(text: str) -> str:
    """Markdown as the percent format's comment lines."""
    return "\n".join(f"# {line}" if line else "#" for line in text.rstrip("\n").splitlines())


def _words(names) -> str:
    quoted = [f"`{n}`" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _answers(grade_ids) -> str:
    return "\n\n".join(f'# %% answer="{g}"' for g in grade_ids)


@functools.cache
def lecture_sections() -> dict[str, str]:
    return dict(_BEGIN.findall(PROSE.read_text(encoding="utf-8")))


@functools.cache
def variant_sections() -> dict[str, str]:
    parts = _SECTION.split(VARIANT_PROSE.read_text(encoding="utf-8"))
    return {name: body.strip("\n") + "\n\n" for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def _init_lines(v: Variant) -> str:
    """init_params's entries, in the order the variant's parameter lines (variants.parameters) draw them."""
    gain = GAIN_CODE[v.activation.name]
    entries = [
        ('"C"', "randn(vocab_size, n_embd)"),
        ('"W1"', f"randn(fan_in, n_hidden) * {gain} / fan_in**0.5",
         f"Kaiming init for {v.activation.name}"),
        ('"b1"', "randn(n_hidden) * 0.1"),
        ('"W2"', "randn(n_hidden, vocab_size) * 0.1"),
        ('"b2"', "randn(vocab_size) * 0.1"),
    ]
    if v.norm.parameters:
        gain_name, bias_name = v.norm.parameters
        entries += [(f'"{gain_name}"', "randn(1, n_hidden) * 0.1 + 1.0"),
                    (f'"{bias_name}"', "randn(1, n_hidden) * 0.1")]
    if v.residual:
        entries += [('"W3"', f"randn(n_hidden, n_hidden) * {gain} / n_hidden**0.5 * 0.5",
                     "half the hidden layer's gain: the branch adds to h"),
                    ('"b3"', "randn(n_hidden) * 0.1")]
    return "\n".join(f"        {e[0]}: {e[1]}," + (f"  # {e[2]}" if len(e) > 2 else "") for e in entries)


def _forward_lines(v: Variant, exercise) -> str:
    """The forward cell's `name = ...` lines (the builder fills them from the network), grouped under
    comments as the lecture's are."""
    net = exercise.network
    act = v.activation.names("h")
    headers = {"emb": None, v.norm.pre: "# Linear layer 1", act[0]: f"# Non-linearity: {v.activation.name}",
               v.feature: None, "logits": "# Linear layer 2",
               "logit_maxes": "# Cross-entropy loss, the same as F.cross_entropy(logits, Yb)"}
    if v.norm.parameters:
        headers[net.intermediates[net.intermediates.index(v.norm.pre) + 1]] = f"# {NORM_HEADER[v.norm.name]}"
    if v.residual:
        headers["rpreact"] = "# Residual block: the same activation on a branch, added to h"
    notes = {"emb": "embed the characters into vectors", "embcat": "concatenate the vectors",
             v.norm.pre: "hidden layer pre-activation", "h": "hidden layer", "logits": "output layer",
             "norm_logits": "subtract the max for numerical stability"}
    if v.residual:
        notes["hres"] = "the skip and the branch"
    lines = []
    for name in net.intermediates:
        if headers.get(name):
            lines.append(headers[name])
        lines.append(f"{name} = ..." + (f"  # {notes[name]}" if name in notes else ""))
    return "\n".join(lines)


def _fused_forward(v: Variant) -> str:
    """Exercise 4's fused_forward: the network's lines with F.cross_entropy for the loss, returning the
    cache manual_backward is given. Batch norm's statistics come from `bnstats` once training is over,
    as in the lecture's (whose lines it takes); no other normalization needs them."""
    lecture = lecture_sections()["ex4"]
    lecture = lecture[lecture.index("def fused_forward"):lecture.index("    h = torch.tanh(hpreact)")]
    if v.norm.name == "batchnorm":
        head = lecture
    else:
        head = ('def fused_forward(params, X, Y=None):\n'
                '    """The loss (None without targets Y) and the cache that a backward pass needs."""\n'
                '    emb = params["C"][X]\n'
                '    embcat = emb.view(emb.shape[0], -1)\n'
                f'    {v.norm.pre} = embcat @ params["W1"] + params["b1"]\n')
        if v.norm.name == "layernorm":
            head += ('    lnmean = hpreln.mean(1, keepdim=True)\n'
                     '    lnvar = hpreln.var(1, keepdim=True, unbiased=False)  # 1/H, as in exercise 1\n'
                     '    lnvar_inv = (lnvar + 1e-5)**-0.5\n'
                     '    lnraw = (hpreln - lnmean) * lnvar_inv\n'
                     '    hpreact = params["lngain"] * lnraw + params["lnbias"]\n')
    body = v.activation.forward("hpreact", "h")
    if v.residual:
        body += 'rpreact = h @ params["W3"] + params["b3"]\n' + v.activation.forward("rpreact", "r") + "hres = h + r\n"
    body += f'logits = {v.feature} @ params["W2"] + params["b2"]\n'
    body += "loss = None if Y is None else F.cross_entropy(logits, Y)\n"
    cache = textwrap.fill(", ".join(f"{c}={'X' if c == 'Xb' else c}" for c in v.cache()), 96,
                          initial_indent="cache = dict(", subsequent_indent=" " * 13) + ")\n"
    return head + textwrap.indent(body + cache + "return loss, cache\n", "    ")


def fills(name: str) -> dict[str, str]:
    """Every `{{key}}` of backprop_ninja_variant.py and of the edits, for variant `name`."""
    v, exercise = parse(name), load(f"makemore-mlp/{name}")
    net, act, norm = exercise.network, v.activation, v.norm
    texts = prose(name)
    atomic = exercise.atomic
    after_act = atomic.index("dhpreact") + 1  # 1b ends with the activation's input, 1c with the norm's
    pieces = [*([NORM_WORDS[norm.name]] if norm.parameters else []), ACTIVATION_WORDS[act.name],
              *(["the residual block"] if v.residual else [])]
    architecture = ("a linear layer, " + ", ".join(pieces[:-1]) + " and " + pieces[-1]) if len(pieces) > 1 \
        else f"a linear layer and {pieces[0]}"
    bullet_1b = _md(texts.get("1b", ""))
    if act.name == "tanh":  # the lecture's own tanh bullet, before the residual block's
        lecture_1b = lecture_sections()["1b"]
        tanh = lecture_1b[lecture_1b.index("# - Differentiate tanh"):].split("\n\n")[0]
        bullet_1b = tanh + "\n" + bullet_1b
    reused = [s for s in net.intermediates if s != net.loss and len(net.consumers(s)) > 1]
    retained = textwrap.fill(", ".join(s for s in reversed(net.intermediates) if s != net.loss), 88,
                             subsequent_indent=" " * 10)
    count = len(v.parameters)
    return {
        "variant": name,
        "architecture": architecture,
        "changes": v.describe(),
        "count": str(len(atomic)),
        "exercise3": (f"**Exercise 3**: the gradient through {NORM_WORDS[norm.name]} in one formula (`d{norm.pre}`)."
                      if norm.parameters else "*No exercise 3*: nothing normalizes this network, so there is "
                      "no normalization layer to fuse."),
        "parameters": ", ".join(v.parameters),
        "pre": norm.pre,
        "gain_sentence": (f", and the {NORM_WORDS[norm.name]} gain `{norm.parameters[0]}` is not exactly one"
                          if norm.parameters else ""),
        "feature": v.feature,
        "activation": ACTIVATION_WORDS[act.name],
        "gain": GAIN_WORDS[act.name],
        "init": _init_lines(v),
        "forward_pieces": " and ".join([", ".join(pieces[:-1]), pieces[-1]] if len(pieces) > 1 else pieces),
        "norm_sentence": NORM_SENTENCE[norm.name],
        "forward": _forward_lines(v, exercise),
        "retained": retained,
        "reused": _words(reused),
        "block_1b": ("" if not v.residual else ", the residual block") + f" and {ACTIVATION_WORDS[act.name]}",
        "1b": bullet_1b,
        "answers_1b": _answers(atomic[atomic.index("dlogits") + 1:after_act]),
        "1c": _md(texts.get("1c", "")),
        "answers_1c": _answers(atomic[after_act:atomic.index("dembcat")]),
        "1d": _md(texts.get("1d", "")),
        "ex3": _md(texts.get("ex3", "")),
        "ex3_cell": norm.fused.grade_id if norm.fused else "",
        "cache": _words(v.cache()),
        "fused_forward": _fused_forward(v),
        "parameter_count": COUNT_WORDS.get(count, str(count)),
        "and_3": " and 3" if norm.parameters else "",
        "float64_exercises": "Exercises 1 to 3" if norm.parameters else "Exercises 1 and 2",
        "checks": "\n\n".join(f'# %% graded="ex4_d{p}"\n'
                                f'check("ex4_d{p}", answers="grads", gradients_of="leaves")' for p in v.parameters),
        "ex4_after": _md(texts.get("ex4", "")),
        "fused_words": ", ".join(["cross-entropy", *([NORM_WORDS[norm.name]] if norm.parameters else [])]),
    }


def _replaced(name: str) -> dict[str, str | None]:
    """Section -> the variant's text for it: "variant" (backprop_ninja_variant.py's), "edit" (the lecture's
    with EDITS), None (left out); a section not named keeps the lecture's text."""
    v = parse(name)
    out: dict[str, str | None] = dict.fromkeys(("intro", "params", "forward", "rules", "ex4", "ex4_checks", "training"),
                                                "variant")
    out["init"] = "edit"
    if v.activation.name != "tanh" or v.residual:
        out["1b"] = "variant"
    if v.norm.name != "batchnorm":
        out.update({"1c": "variant" if v.norm.parameters else None, "ex3": "variant" if v.norm.parameters else None,
                    "1d": "edit", "calibrate": "variant", "evaluate": "edit", "takeaway": "edit"})
    return out


def _fill(text: str, values: dict[str, str], where: str) -> str:
    def key(match: re.Match) -> str:
        if match[1] not in values:
            raise SourceError(f"{VARIANT_PROSE}: {where}: nothing fills {{{{{match[1]}}}}}")
        return values[match[1]]

    return _KEY.sub(key, text)


@functools.cache
def source(name: str) -> str:
    """Variant `name`'s notebook source in the percent format (the lecture's for the lecture's variant)."""
    text = PROSE.read_text(encoding="utf-8")
    if name == LECTURE_VARIANT:
        return text
    values = fills(name)
    replaced = _replaced(name)

    def section(match: re.Match) -> str:
        how = replaced.get(match[1], "lecture")
        if how == "lecture":
            return match[0]
        if how is None:
            return ""
        if how == "variant":
            return _fill(variant_sections()[match[1]], values, match[1]).strip("\n") + "\n\n"
        body = match[2].strip("\n") + "\n\n"
        for old, new in EDITS[match[1]]:
            if body.count(old) != 1:
                raise SourceError(f"{PROSE}: section {match[1]}: the edit of {old!r} no longer finds its text once")
            body = body.replace(old, _fill(new, values, match[1]))
        return body

    return _BEGIN.sub(section, text)

