"""The hidden configurations: sizes, seeds and init options drawn from the course's secret salt, for
any exercise.

Sizes unlike the lecture's and unlike each other catch hard-coded numbers and swapped dimensions;
what else a configuration must hold to catch a mistake (a batch whose targets are all distinct, an init
that makes a dropped constant visible) is the exercise's to say, through `Exercise.hidden`.
"""
from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from grader.exercise import Exercise, Sizes, load

# The probe's seed is public (the lecture's): its job, catching hard-coded lecture sizes, needs no
# secret, and so whatever is drawn from it (the feedback page's pictures) shows nothing hidden.
PROBE_SEED = 2147483647
# Draws before an exercise's ranges are taken to admit no configuration (an exercise's mistake, which
# must stop the grader with a message rather than hang it); a workable exercise needs a handful.
MAX_DRAWS = 10_000


@dataclass(frozen=True)
class Config:
    """One configuration. It names its exercise by the spec string course.yml gives (`load` resolves
    it), not by the value, and holds its init options as (name, value) pairs: a Config crosses to
    Dask workers by pickle, and an exercise's functions do not pickle."""

    exercise: str
    name: str
    sizes: Sizes
    seed: int
    options: tuple[tuple[str, object], ...] = ()
    scored: bool = True

    @property
    def init_options(self) -> dict:
        """What `Exercise.init` is called with beyond the sizes, generator and dtype."""
        return dict(self.options)


def _rng(salt: str, label: str) -> random.Random:
    digest = hashlib.sha256(f"{salt}\0{label}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _sides(exercise: Exercise, spare: bool = True) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Each ranged size's drawable values below its lecture value and above it, where its range has both.

    A size hard-coded to the lecture's fails only where the drawn size is on the right side of it: a slice
    `[:32]` of a batch of 21 takes every row and is right, of a batch of 35 drops three. Drawn independently,
    four configurations (or the self-check's three) could all fall below, and the grader and the self-check
    disagree on that answer; so the last configuration takes whichever side the others missed.

    With `spare`, a side holds no other size's lecture value unless those are all it has (an instructor trial's
    classes, 4 in 2..6 beside sizes of 5 and 6 in the notebook, were 2 or 3 in every configuration, so `[:, :4]`
    scored full); without, every value but the size's own lecture value.
    """
    lecture = set(exercise.lecture.values())
    found = {}
    for key, (low, high) in exercise.ranges.items():
        own = exercise.lecture[key]
        values = [v for v in range(low, high) if v != own]
        kept = [v for v in values if v not in lecture] if spare else values
        below = tuple(v for v in kept if v < own) or tuple(v for v in values if v < own)
        above = tuple(v for v in kept if v > own) or tuple(v for v in values if v > own)
        if below and above:
            found[key] = (below, above)
    return found


def never_above(exercise: Exercise) -> list[str]:
    """The ranged sizes never drawn above their lecture value (the range ends there): a slice to the lecture
    value takes every entry of every configuration, and is never caught."""
    return [key for key, (_, high) in exercise.ranges.items() if high <= exercise.lecture[key] + 1]


def _drawn(exercise: Exercise, rng: random.Random, index: int, count: int,
           earlier: list[Sizes], above: bool = False) -> tuple[Sizes, dict]:
    """Sizes all different from one another and from every lecture size, that the exercise accepts for
    configuration `index` of `count`, with the init options it gives them. A lecture size without a range
    is a structural constant (a WaveNet's context of 8, halved three times): every configuration keeps it,
    and no drawn size equals it, so a cell that writes it where a drawn size belongs still fails. Sizes an
    `earlier` configuration has are drawn again while others are to be had (narrow ranges gave an instructor
    two configurations of four alike, three sizes tried where four were meant). The last configuration draws
    each size from the side of its lecture value (`_sides`) no earlier one took, while that can be met; with
    `above`, every size above it where its range holds one."""
    lecture = set(exercise.lecture.values())
    constants = {k: v for k, v in exercise.lecture.items() if k not in exercise.ranges}
    sides = {True: _sides(exercise), False: _sides(exercise, spare=False)}
    side = dict.fromkeys(sides[True], 1) if above else {}  # size -> 0 below its lecture value, 1 above
    if index == count - 1 and earlier:
        for key in sides[True]:
            taken = {getattr(s, key) > exercise.lecture[key] for s in earlier}
            if len(taken) == 1:
                side[key] = 0 if taken == {True} else 1
    third = MAX_DRAWS // 3
    for attempt in range(MAX_DRAWS):
        keep = attempt < 2 * third  # the sides forced: first as drawn, then (narrow ranges whose forced sides
        # leave another size only lecture values: an instructor trial's) with any size's lecture value but its own
        loose = third <= attempt < 2 * third
        forced = {k: sides[not loose][k][at] for k, at in side.items()} if keep else {}
        picked = {k: rng.choice(forced[k]) if k in forced else rng.randrange(*bounds)
                  for k, bounds in exercise.ranges.items()}
        values = list(picked.values())
        if len(set(values)) < len(values) or any(
                v in lecture and not (keep and v in forced.get(k, ())) and not (loose and v != exercise.lecture[k])
                for k, v in picked.items()):
            continue
        if keep and Sizes(**picked, **constants) in earlier:
            continue
        sizes = Sizes(**picked, **constants)
        options = exercise.hidden(index, count, sizes)
        if options is not None:
            return sizes, options
    raise ValueError(f"exercise {exercise.name}: no sizes drawn from its ranges in {MAX_DRAWS} tries suit "
                     f"configuration {index + 1} of {count} (all different, none a lecture size, and accepted "
                     "by its `hidden`)")


def generate(exercise: str, salt: str, count: int) -> list[Config]:
    """`count` scored configurations of the exercise course.yml names (`exercise`, its spec string),
    plus an unscored lecture-sized probe.

    The probe is what lets feedback say "right for the lecture's sizes but not for the others": an answer
    that matches there and nowhere else hard-codes a lecture size. It is the same for every salt.
    """
    value = load(exercise)
    configs = []
    for i in range(count):
        rng = _rng(salt, f"config{i}")
        sizes, options = _drawn(value, rng, i, count, [c.sizes for c in configs])
        configs.append(Config(exercise, f"config{i + 1}", sizes, rng.getrandbits(63), tuple(sorted(options.items()))))
    configs.append(Config(exercise, "lecture-sizes", value.lecture, PROBE_SEED, scored=False))
    return configs


def training_config(exercise: str, salt: str) -> Config:
    """The configuration the whole-run check trains on, drawn from the salt: a plain one (neither the first
    configuration's condition nor the last's scales) with every size above its lecture value where its range
    holds one, so that a size hard-coded to the lecture's fails the run, for the grader and the self-check alike
    (a trial's `[:32]` in the training function failed the self-check's run, on a batch of 37, and passed the
    grader's, on its first configuration's batch of 11)."""
    value = load(exercise)
    rng = _rng(salt, "training")
    sizes, options = _drawn(value, rng, 1, 3, [], above=True)
    return Config(exercise, "training", sizes, rng.getrandbits(63), tuple(sorted(options.items())))
