"""One colour per method and per pipeline schedule, the same in every figure.

Every plot function that colours by method or schedule takes its colours from here, so greedy is
the same red whether a figure draws two methods or five, and ``1f1b`` the same orange in the
simulator's, the benchmark's and the scaling figures. A schedule and its ``-recompute`` variant
share a hue (dark and light). Names not listed (``chunked-12``, ``chunked@2,3``, a schedule added
later) get a colour fixed by the name itself, never by its position among the names drawn.
"""
from __future__ import annotations

import re
import zlib

import seaborn as sns

_DEEP = sns.color_palette("deep", 10).as_hex()
_PAIRED = sns.color_palette("tab20", 20).as_hex()   # (dark, light) pairs of one hue
_SPARE = sns.color_palette("husl", 24).as_hex()     # for names listed nowhere: picked by the name's hash

METHOD_COLORS = {
    "backprop": _DEEP[0],      # blue
    "greedy": _DEEP[3],        # red
    "overlapping": _DEEP[1],   # orange
    "chunked-2": _DEEP[2],     # green
    "chunked-3": _DEEP[4],     # purple
    "chunked-4": _DEEP[5],     # brown
    "chunked-5": _DEEP[6],     # pink
    "chunked-6": _DEEP[8],     # olive
    "chunked-7": _DEEP[9],     # cyan
    "chunked-1": _DEEP[7],     # grey (the same updates as backprop)
}

SCHEDULE_COLORS = {
    "local": _PAIRED[0], "local/M": _PAIRED[1],
    "1f1b": _PAIRED[2], "1f1b-recompute": _PAIRED[3],
    "gpipe": _PAIRED[4], "gpipe-recompute": _PAIRED[5],
    "interleaved-1f1b": _PAIRED[6], "interleaved-1f1b-recompute": _PAIRED[7],
    "interleaved-zb": _PAIRED[8], "interleaved-zb-recompute": _PAIRED[9],
    "zbv": _PAIRED[10], "zbv-recompute": _PAIRED[11],
    "dualpipev": _PAIRED[12], "dualpipev-recompute": _PAIRED[13],
    "ddp": _PAIRED[14],
}


def _by_name(name: str) -> str:
    return _SPARE[zlib.crc32(str(name).encode()) % len(_SPARE)]


def method_color(method: str) -> str:
    """The colour of ``method`` (a method name as records spell it), the same in every figure."""
    return METHOD_COLORS.get(str(method)) or _by_name(method)


def schedule_color(schedule: str) -> str:
    """The colour of a pipeline schedule name (``local``, ``1f1b-recompute``, ...) in every figure."""
    name = str(schedule)
    if name in SCHEDULE_COLORS:
        return SCHEDULE_COLORS[name]
    base = re.sub(r"-recompute$", "", name)
    return SCHEDULE_COLORS.get(base) or _by_name(name)


def method_colors(methods) -> dict:
    """``{method: colour}`` for the methods a figure draws (:func:`method_color` of each)."""
    return {m: method_color(m) for m in methods}


def schedule_colors(schedules) -> dict:
    """``{schedule: colour}`` for the schedules a figure draws (:func:`schedule_color` of each)."""
    return {s: schedule_color(s) for s in schedules}


def strategy_color(schedule: str, method: str | None = None) -> str:
    """The colour of a race strategy (:mod:`paper_repro.race`): black for one process, greedy's
    red for the local pipeline with greedy, else the schedule's (``local`` blue, ``local/M`` light
    blue, ``gpipe`` green, ...): every strategy of the race its own colour, the local ones blue or red."""
    if schedule == "single":
        return "#222222"
    if schedule.startswith("local") and method == "greedy":
        return method_color(method)
    return schedule_color(schedule)

