"""The one result table of ``estimate``, ``simulate`` and ``bench pipeline``.

Each tool hands :func:`format_table` records with these keys (missing ones print ``-``):

* ``schedule`` (a name of :mod:`paper_repro.names`; ``label`` overrides it for ``local/N``),
  ``stages``, ``micro_batch``, ``micro_batches``;
* ``samples_per_s``;
* ``comm_bytes_per_sample``: ``{"forward": bytes, "backward": bytes}`` between devices;
* ``peak_mem_bytes_per_stage``: a list, one per stage;
* ``busy_fraction_per_stage``: a list of fractions of the time each stage computes;
* ``stage_plan``: the stage cut, ``{"blocks": [[block, ...] per stage], ...}`` (``bench``'s
  :meth:`~paper_repro.distributed.cut.StagePlan.to_dict`; virtual stages in order for the
  schedules with two stages per process);
* ``samples_per_s_runs``: samples/s of every repeat, when ``samples_per_s`` is their median.

Rows come in one order in every tool (:func:`ordered`: stages, micro-batch size, then
:data:`paper_repro.names.SCHEDULE_ORDER`). The ratio columns divide samples/s by those of
``1f1b`` and ``1f1b-recompute`` with the same stages and micro-batch size, when the records
hold them. Lists are printed in full, wrapped over continuation lines, never cut. Nothing here
imports torch.
"""
from __future__ import annotations

import re
import textwrap

from .names import RECOMPUTE_REFERENCE, REFERENCE, SCHEDULE_ORDER

MIB = 2 ** 20
BUSY_WIDTH = 30     # characters of "busy per stage" on one line; longer lists wrap
MEM_WIDTH = 30
CUT_WIDTH = 20

LEGEND = ("S: stages (devices); B: samples per micro-batch; M: micro-batches per step; "
          f"x{REFERENCE}, x{RECOMPUTE_REFERENCE}: samples/s divided by that of 1F1B, and of 1F1B with "
          "recomputation, on the same S and B; fwd B/sample, bwd B/sample: bytes per sample sent forward "
          "(activations, labels) and backward (gradients) between devices; peak MiB: peak memory of "
          "each stage; busy: fraction of the time each stage computes, stage 0 first; min-max: the lowest and "
          "highest samples/s over bench's --repeats (samples/s is then their median); blocks per stage: "
          "the cut, first-last block of each stage. The tools differ by design: estimate prices FLOPs on an "
          "ideal machine (sends are free), simulate replays the schedules with per-block times calibrated "
          "here, bench measures real processes once per repeat, with this machine's noise: quote the "
          "median of --repeats 3 or more")


def label(record: dict) -> str:
    """The schedule's name in tables and figures. ``local``: every stage steps after each
    micro-batch; ``local/M``: once per step of M micro-batches (the pipelined-backprop
    schedules' optimizer semantics); ``local/N``: every N micro-batches for another N."""
    u = record.get("update_every") or 1
    if record["schedule"] != "local" or u == 1:
        return record["schedule"]
    return "local/M" if u == record.get("micro_batches") else f"local/{u}"


def _name(r: dict) -> str:
    return r.get("label") or label(r)


def _busy(r: dict):
    busy = r.get("busy_fraction_per_stage")
    return busy if busy is not None else r.get("busy_per_stage")    # simulate's records of earlier releases


def stage_plan(record: dict) -> dict | None:
    """The stage cut a record holds (``stage_plan``; ``split`` in records of earlier releases),
    None if it holds none."""
    return record.get("stage_plan", record.get("split"))


def cut_text(record: dict) -> str:
    """The stage cut of ``record`` compactly: each stage's first-last block (``0-2 3-7 8-8``);
    ``-`` when the record holds no cut."""
    plan = stage_plan(record)
    blocks = plan.get("blocks") if isinstance(plan, dict) else None
    if not blocks:
        return "-"
    return " ".join(f"{b[0]}-{b[-1]}" for b in blocks)


def spread_text(record: dict) -> str:
    """``min-max`` of the samples/s of ``record``'s repeats, ``-`` for a single run."""
    runs = [v for v in record.get("samples_per_s_runs") or [] if v is not None]
    return f"{min(runs):.1f}-{max(runs):.1f}" if len(runs) > 1 else "-"


def order_key(record: dict) -> tuple:
    """Where ``record`` goes in a table: by stages, micro-batch size, then schedule in
    :data:`~paper_repro.names.SCHEDULE_ORDER` (``local/N`` after ``local``, by N)."""
    name = _name(record)
    base, _, every = name.partition("/")
    if name in SCHEDULE_ORDER:
        rank, sub = SCHEDULE_ORDER.index(name), 0
    elif base in SCHEDULE_ORDER and every.isdigit():
        rank, sub = SCHEDULE_ORDER.index(base), int(every)
    else:
        rank, sub = len(SCHEDULE_ORDER), 0
    return (record.get("stages") or 0, record.get("micro_batch") or 0, rank, sub)


def ordered(records: list[dict]) -> list[dict]:
    """``records`` in the one row order of every tool's table (stable: repeats keep theirs)."""
    return sorted(records, key=order_key)


def _num(value, fmt: str) -> str:
    """``value`` in ``fmt`` (e.g. ``">10.1f"``); None as ``-`` in the same width."""
    if value is None:
        width = re.match(r">(\d+)", fmt)
        return "-".rjust(int(width.group(1)) if width else 1)
    return format(value, fmt)


def ratios(records: list[dict]) -> list[tuple[float | None, float | None]]:
    """Per record: samples/s over 1F1B's and over 1F1B with recomputation's (same stages and
    micro-batch size), None where the records hold no such run."""
    refs: dict[tuple, dict[str, float]] = {}
    for r in records:
        if r.get("samples_per_s"):
            refs.setdefault((r.get("stages"), r.get("micro_batch")), {})[_name(r)] = r["samples_per_s"]
    out = []
    for r in records:
        mine, ref = r.get("samples_per_s"), refs.get((r.get("stages"), r.get("micro_batch")), {})
        out.append(tuple(mine / ref[k] if mine is not None and k in ref else None
                         for k in (REFERENCE, RECOMPUTE_REFERENCE)))
    return out


def format_table(records: list[dict], legend: bool = True) -> str:
    """The records as a text table, one run per line (lists wrap onto continuation lines), in
    the order of :func:`ordered`, with a legend explaining every header."""
    records = ordered(records)
    head = (f"{'schedule':<26} {'S':>3} {'B':>4} {'M':>4} {'samples/s':>10} {'min-max':>15} {'x' + REFERENCE:>7} "
            f"{'x' + RECOMPUTE_REFERENCE:>16} {'fwd B/sample':>12} {'bwd B/sample':>12}  "
            f"{'blocks per stage':<{CUT_WIDTH}}  {'peak MiB per stage':<{MEM_WIDTH}}  busy per stage")
    lines = [head, "-" * (len(head) + BUSY_WIDTH - len("busy per stage"))]
    for r, (vs_ref, vs_recompute) in zip(records, ratios(records)):
        comm = r.get("comm_bytes_per_sample") or {}
        mem = r.get("peak_mem_bytes_per_stage")
        busy = _busy(r)
        cut_lines = textwrap.wrap(cut_text(r), CUT_WIDTH)
        mem_lines = textwrap.wrap(" ".join(f"{m / MIB:.1f}" for m in mem), MEM_WIDTH) if mem else ["-"]
        busy_lines = textwrap.wrap(" ".join(f"{b:.2f}" for b in busy), BUSY_WIDTH) if busy else ["-"]
        first = (f"{_name(r):<26} {_num(r.get('stages'), '>3')} {_num(r.get('micro_batch'), '>4')} "
                 f"{_num(r.get('micro_batches'), '>4')} {_num(r.get('samples_per_s'), '>10.1f')} "
                 f"{spread_text(r):>15} {_num(vs_ref, '>7.2f')} {_num(vs_recompute, '>16.2f')} "
                 f"{_num(comm.get('forward'), '>12,.0f')} {_num(comm.get('backward'), '>12,.0f')}  ")
        for i in range(max(len(cut_lines), len(mem_lines), len(busy_lines))):
            start = first if i == 0 else " " * len(first)
            c, m, b = (col[i] if i < len(col) else "" for col in (cut_lines, mem_lines, busy_lines))
            lines.append(f"{start}{c:<{CUT_WIDTH}}  {m:<{MEM_WIDTH}}  {b}".rstrip())
    if legend:
        lines += ["", *textwrap.wrap(LEGEND, max(len(head), 80))]
    return "\n".join(lines)
