"""What the `backprop-ninja` command offers, asked of the command itself: a test that loops over the formats
it knows would let a new one escape it."""
from __future__ import annotations

import click

from grader.cli import main


def choices(command: str, option: str) -> tuple[str, ...]:
    """The values `backprop-ninja COMMAND OPTION` accepts (its click.Choice)."""
    found = main.get_command(click.Context(main), command)
    param = next(p for p in found.params if option in p.opts)
    return tuple(param.type.choices)


def export_formats() -> tuple[str, ...]:
    return choices("export", "--format")
