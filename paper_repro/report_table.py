"""The one result table of ``estimate``, ``simulate`` and ``bench pipeline``.

Each tool hands :func:`format_table` records with these keys (missing ones print ``-``):

* ``schedule`` (a name of :mod:`paper_repro.names`; ``label`` overrides it for ``local/N``),
  ``stages``, ``micro_batch``, ``micro_batches``;
* ``samples_per_s``;
* ``comm_bytes_per_sample``: ``{"forward": bytes, "backward": bytes}`` between devices;
* ``peak_mem_bytes_per_stage``: a list, one per stage;
* ``busy_fraction_per_stage`` (or ``busy_per_stage``): a list of fractions of the time each
  stage computes.

The ratio columns divide samples/s by those of ``1f1b`` and ``1f1b-recompute`` with the same
stages and micro-batch size, when the records hold them. Lists are printed in full, wrapped
over continuation lines, never cut. Nothing here imports torch.
"""
from __future__ import annotations

import re
import textwrap

from .names import RECOMPUTE_REFERENCE, REFERENCE

MIB = 2 ** 20
BUSY_WIDTH = 30     # characters of "busy per stage" on one line; longer lists wrap
MEM_WIDTH = 30

LEGEND = ("S: stages (devices); B: samples per micro-batch; M: micro-batches per step; "
          f"x{REFERENCE}, x{RECOMPUTE_REFERENCE}: samples/s divided by that of 1F1B, and of 1F1B with "
          "recomputation, on the same S and B; fwd B/sample, bwd B/sample: bytes per sample sent forward "
          "(activations, labels) and backward (gradients) between devices; peak MiB: peak memory of "
          "each stage; busy: fraction of the time each stage computes, stage 0 first")


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
    return busy if busy is not None else r.get("busy_per_stage")


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
    """The records as a text table, one run per line (lists wrap onto continuation lines),
    with a legend explaining every header."""
    head = (f"{'schedule':<26} {'S':>3} {'B':>4} {'M':>4} {'samples/s':>10} {'x' + REFERENCE:>7} "
            f"{'x' + RECOMPUTE_REFERENCE:>16} {'fwd B/sample':>12} {'bwd B/sample':>12}  {'peak MiB per stage':<{MEM_WIDTH}}  "
            f"busy per stage")
    lines = [head, "-" * (len(head) + BUSY_WIDTH - len("busy per stage"))]
    indent = len(head) - len("busy per stage")
    for r, (vs_ref, vs_recompute) in zip(records, ratios(records)):
        comm = r.get("comm_bytes_per_sample") or {}
        mem = r.get("peak_mem_bytes_per_stage")
        busy = _busy(r)
        mem_lines = textwrap.wrap(" ".join(f"{m / MIB:.1f}" for m in mem), MEM_WIDTH) if mem else ["-"]
        busy_lines = textwrap.wrap(" ".join(f"{b:.2f}" for b in busy), BUSY_WIDTH) if busy else ["-"]
        first = (f"{_name(r):<26} {_num(r.get('stages'), '>3')} {_num(r.get('micro_batch'), '>4')} "
                 f"{_num(r.get('micro_batches'), '>4')} {_num(r.get('samples_per_s'), '>10.1f')} "
                 f"{_num(vs_ref, '>7.2f')} {_num(vs_recompute, '>16.2f')} "
                 f"{_num(comm.get('forward'), '>12,.0f')} {_num(comm.get('backward'), '>12,.0f')}  ")
        for i in range(max(len(mem_lines), len(busy_lines))):
            start = first if i == 0 else " " * len(first)
            m = mem_lines[i] if i < len(mem_lines) else ""
            b = busy_lines[i] if i < len(busy_lines) else ""
            lines.append(f"{start:<{indent - MEM_WIDTH - 2}}{m:<{MEM_WIDTH}}  {b}".rstrip())
    if legend:
        lines += ["", *textwrap.wrap(LEGEND, max(len(head), 80))]
    return "\n".join(lines)
