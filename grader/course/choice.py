"""Which exercise a course grades, from course.yml's `exercise:` setting, and the list of variants an
instructor chooses from (`backprop-ninja variants`).

`exercise:` is either a name (`makemore-mlp`, `makemore-mlp/relu-layernorm`, or `module:attribute`), or
a mapping naming an exercise with variants and one of them:

    exercise: {name: makemore-mlp, variant: relu-layernorm}
    exercise: {name: makemore-mlp, variant: from-salt}

`from-salt` draws the variant from the course's secret salt: the same course always grades the same
network, and another term's course (another salt) most likely a different one.
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping

from grader.exercise import FAMILIES, ExerciseError

FROM_SALT = "from-salt"


def _family(name: str):
    if name not in FAMILIES:
        raise ExerciseError(f"exercise {name!r} has no variants: the ones that do are {', '.join(FAMILIES)}")
    return importlib.import_module(FAMILIES[name])


def spec(setting: object, salt: str) -> str:
    """The name `grader.exercise.load` takes for course.yml's `exercise:` setting; ExerciseError (one
    line) for a setting that names nothing."""
    if isinstance(setting, str):
        return setting
    if not isinstance(setting, Mapping):
        raise ExerciseError(f"expected a name or a mapping with name and variant, not {type(setting).__name__}")
    unknown = sorted(set(setting) - {"name", "variant"})
    if unknown or not isinstance(setting.get("name"), str) or not isinstance(setting.get("variant"), str):
        extra = f" (unknown: {', '.join(map(str, unknown))})" if unknown else ""
        raise ExerciseError(f"expected name: and variant: (a variant or {FROM_SALT}), both text{extra}")
    family = _family(setting["name"])
    variant = family.from_salt(salt) if setting["variant"] == FROM_SALT else setting["variant"]
    if variant not in family.NAMES:
        raise ExerciseError(f"unknown variant {variant!r} of {setting['name']}: the variants are "
                            f"{', '.join(family.NAMES)}, or {FROM_SALT}")
    return f"{setting['name']}/{variant}"


def exercise_file(name: str) -> str:
    """Variant `name` (`relu-layernorm`, or `makemore-mlp/relu-layernorm`) as an exercise file of one's own;
    ExerciseError naming the variants for any other name."""
    family, slash, variant = name.rpartition("/")
    families = [family] if slash else list(FAMILIES)
    for family in families:
        module = _family(family)
        if variant in module.NAMES:
            return module.exercise_file(variant)
    raise ExerciseError(f"unknown variant {name!r}: `backprop-ninja variants` lists them")


def listing() -> str:
    """Every variant of every exercise that has some, with what changes for the student."""
    lines = []
    for name in FAMILIES:
        family = _family(name)
        lines.append(f"{name}: exercise: {{name: {name}, variant: <one below, or {FROM_SALT}>}}")
        width = max(map(len, family.NAMES))
        lines += [f"  {variant:<{width}}  {family.describe(variant)}" for variant in family.NAMES]
    return "\n".join(lines) + "\n"
