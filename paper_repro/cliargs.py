"""Argument types for argparse, shared by ``paper-repro`` (:mod:`paper_repro.cli`) and the
pipeline worker's own entry point (``python -m paper_repro.distributed.run``).

Each one turns a bad value into ``argparse.ArgumentTypeError`` naming the value, so the
parser prints one line and exits with status 2. Nothing here imports the package.
"""
from __future__ import annotations

import argparse
import json
import sys


def _int_at_least(text: str, least: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a {what} integer, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"expected a {what} integer, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _int_at_least(text, 1, "positive")


def non_negative_int(text: str) -> int:
    return _int_at_least(text, 0, "non-negative")


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def json_dict(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r} ({err})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def int_list(text: str) -> list[int]:
    """``"8,16,32"`` -> ``[8, 16, 32]`` (positive integers only)."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return values


def choice_list(valid, what: str):
    """A type for a comma list of ``what`` names from ``valid`` (``all`` = every one of them)."""
    valid = tuple(valid)

    def parse(text: str) -> list[str]:
        values = list(valid) if text == "all" else [v.strip() for v in text.split(",") if v.strip()]
        bad = [v for v in values if v not in valid]
        if bad or not values:
            raise argparse.ArgumentTypeError(f"unknown {what} {','.join(bad) or text!r}; valid: "
                                             f"{', '.join(valid)}, a comma list of them, or all")
        return values

    return parse


def float_list(n_min: int = 1, n_max: int | None = None, keywords: tuple[str, ...] = ()):
    """A type for ``n_min`` to ``n_max`` comma-separated non-negative numbers (``"1,2.5"`` ->
    ``(1.0, 2.5)``), or one of ``keywords`` as given (e.g. ``"auto"``)."""
    count = f"{n_min}" if n_max == n_min else f"{n_min} to {n_max}" if n_max else f"at least {n_min}"

    def parse(text: str):
        if text in keywords:
            return text
        try:
            values = tuple(float(v) for v in text.split(","))
        except ValueError:
            values = ()
        if not values or not n_min <= len(values) <= (n_max or len(values)) or any(not v >= 0 for v in values):
            alternatives = "".join(f" or {k}" for k in keywords)
            raise argparse.ArgumentTypeError(f"expected {count} comma-separated non-negative numbers{alternatives}, "
                                             f"got {text!r}")
        return values

    return parse


class _Renamed(argparse.Action):
    """A former spelling of an option: stores into the new option's destination, after a warning
    on stderr that names the new spelling."""

    def __init__(self, option_strings, dest, new: str, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"warning: {option_string} is now {self.new}; {option_string} goes in the next release",
              file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_renamed(parser, old: str, new: argparse.Action) -> None:
    """Accept ``old``, a former spelling of the option ``new`` (an action ``add_argument`` returned),
    with the same destination, type and choices; hidden from ``--help``, warned about when used."""
    parser.add_argument(old, dest=new.dest, type=new.type, choices=new.choices, default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS, action=_Renamed, new=new.option_strings[0])
