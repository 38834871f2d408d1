"""Tables of the pipeline benchmark records: per-run lines, medians over repeats, the
throughput / busy / communication / memory targets, and tidy DataFrames for the figures of
:mod:`paper_repro.plots.pipeline`. The notebook's settings live in :mod:`paper_repro.settings`."""
from __future__ import annotations

import math
import statistics

import pandas as pd

from ..names import RECOMPUTE_REFERENCE
from ..report_table import format_table as _format_table
from ..report_table import label, ordered, stage_plan

MB = 1e6


RECOMPUTE_PEER = RECOMPUTE_REFERENCE


def is_backprop_pipeline(name: str) -> bool:
    return name not in ("ddp",) and not name.startswith("local")


TIMED = ("phases_s", "compute_split_s")     # per-stage timings merged over repeats


def named(records: list[dict]) -> list[dict]:
    """``records`` with a local pipeline whose stages step once per step (``update_every`` =
    ``micro_batches``) named ``local/M``, its own schedule, as in ``estimate`` and ``simulate``
    (``update_every`` stays; another ``update_every`` stays ``local``). Changes the records in
    place and returns them."""
    for r in records:
        if r.get("schedule") == "local" and label(r) == "local/M":
            r["schedule"] = "local/M"
    return records


def median_records(records: list[dict]) -> list[dict]:
    """One record per (schedule, micro-batch size): the median throughput, busy fractions and
    every stage's timings (``per_stage[s]["phases_s"]`` and ``["compute_split_s"]``) over repeats (``repeats`` and
    ``samples_per_s_runs`` say how many and what they were; ``phases_median_of`` marks records
    whose phases are medians, older ones carry the first repeat's); the rest of ``per_stage``
    is the first repeat's; bytes and memory do not change between repeats."""
    groups: dict[tuple, list[dict]] = {}
    for r in ordered(named([dict(r) for r in records])):
        groups.setdefault((label(r), r["micro_batch"]), []).append(r)
    out = []
    for runs in groups.values():
        first = dict(runs[0])
        first["samples_per_s_runs"] = [r["samples_per_s"] for r in runs]
        first["samples_per_s"] = statistics.median(first["samples_per_s_runs"])
        first["busy_fraction_per_stage"] = [statistics.median(r["busy_fraction_per_stage"][s] for r in runs)
                                            for s in range(len(first["busy_fraction_per_stage"]))]
        first["repeats"] = len(runs)
        if first.get("per_stage"):
            first["per_stage"] = [dict(st, **{key: {k: statistics.median(r["per_stage"][s][key][k] for r in runs)
                                                    for k in st[key]}
                                              for key in TIMED if key in st})
                                  for s, st in enumerate(first["per_stage"])]
            first["phases_median_of"] = len(runs)
        out.append(first)
    return out


def format_table(records: list[dict]) -> str:
    """The result table of every tool (:func:`paper_repro.report_table.format_table`)."""
    return _format_table(records)


def _ratio_row(mb, name, runs, peers: list[str], what: str, goal: float) -> dict | None:
    present = [p for p in peers if p in runs]
    if not present:
        return None
    best = max(present, key=lambda p: runs[p]["samples_per_s"])
    ratio = runs[name]["samples_per_s"] / runs[best]["samples_per_s"]
    return dict(micro_batch=mb, target=f"throughput {name} / {what}", goal=f">= {goal:.2f}", value=ratio,
                met=ratio >= goal, peer=best)


def targets(records: list[dict]) -> list[dict]:
    """The benchmark's targets per micro-batch size, from runs measured side by side.

    ``local`` (a step per micro-batch) against 1F1B with recomputation (>= 1.3) and the best
    pipelined-backprop schedule without recomputation (>= 1.0); ``local/M`` (the same optimizer
    steps as the pipelined-backprop schedules) against 1F1B with recomputation (>= 1.5) and the
    best of every pipelined-backprop schedule (>= 1.15); each ``peer`` names the best one.
    Then the least busy local stage (>= 0.9), and (``local/M``, else ``local``) its bytes against
    pipelined backprop with one stage per process (= 0.5) and its memory against 1F1B with
    recomputation (<= 1)."""
    by_mb: dict[int, dict[str, dict]] = {}
    for r in records:
        by_mb.setdefault(r["micro_batch"], {})[label(r)] = r
    rows = []
    for mb, runs in sorted(by_mb.items()):
        backprop = sorted(n for n in runs if is_backprop_pipeline(n))
        plain = [n for n in backprop if not n.endswith("-recompute")]
        goals = {"local": (1.3, plain, "best pipelined backprop without recomputation", 1.0),
                 "local/M": (1.5, backprop, "best pipelined backprop", 1.15)}
        for name, (vs_recompute, peers, what, goal) in goals.items():
            if name not in runs:
                continue
            for row in (_ratio_row(mb, name, runs, [RECOMPUTE_PEER], "1F1B+recompute", vs_recompute),
                        _ratio_row(mb, name, runs, peers, what, goal)):
                if row is not None:
                    rows.append(row)
            busy = min(runs[name]["busy_fraction_per_stage"])
            rows.append(dict(micro_batch=mb, target=f"busy fraction of the least busy {name} stage",
                             goal=">= 0.90", value=busy, met=busy >= 0.9))
        local = runs.get("local/M") or runs.get("local")  # local/M: the cut the baselines also use
        if local is None:
            continue
        bp = next((runs[s] for s in ("1f1b", "gpipe", "1f1b-recompute") if s in runs), None)
        if bp is not None:
            ratio = sum(local["comm_bytes_per_sample"].values()) / sum(bp["comm_bytes_per_sample"].values())
            rows.append(dict(micro_batch=mb, target="comm bytes local / pipelined backprop", goal="= 0.50",
                             value=ratio, met=abs(ratio - 0.5) < 0.005))
        if RECOMPUTE_PEER in runs:
            mine, theirs = local["peak_mem_bytes_per_stage"], runs[RECOMPUTE_PEER]["peak_mem_bytes_per_stage"]
            worst = max(a / b for a, b in zip(mine, theirs))
            rows.append(dict(micro_batch=mb, target="peak memory local / 1F1B+recompute (worst stage)",
                             goal="<= 1.00", value=worst, met=worst <= 1.0))
    return rows


def format_targets(rows: list[dict]) -> str:
    lines = [f"{'mb':>4}  {'target':<66} {'goal':>8} {'measured':>9}  result"]
    for r in rows:
        peer = f"  (best: {r['peer']})" if r.get("peer") else ""
        lines.append(f"{r['micro_batch']:>4}  {r['target']:<66} {r['goal']:>8} {r['value']:>9.3f}  "
                     f"{'met' if r['met'] else 'MISSED'}{peer}")
    return "\n".join(lines)


def to_frame(records: list[dict]):
    """A tidy DataFrame: one row per (run, stage)."""
    rows = []
    for r in records:
        procs = r.get("processes", r["stages"])
        mems = r.get("peak_mem_bytes_per_stage") or [math.nan] * procs
        busy = r.get("busy_fraction_per_stage") or [math.nan] * procs
        for s in range(len(busy)):
            rows.append({"schedule": label(r), "micro_batch": r["micro_batch"], "stage": s,
                         "samples_per_s": r.get("samples_per_s"), "busy_fraction": busy[s],
                         "peak_mem_MB": mems[s] / MB,
                         "fwd_MB_per_sample": r["comm_bytes_per_sample"]["forward"] / MB,
                         "bwd_MB_per_sample": r["comm_bytes_per_sample"]["backward"] / MB})
    return pd.DataFrame(rows)


def comm_frame(records: list[dict]):
    """The communication table (one row per schedule) with the paper's figures beside ours."""
    paper = {"local": 43.2, "local/M": 43.2, "gpipe": 86.4, "1f1b": 86.4, "1f1b-recompute": 86.4}
    rows = []
    for r in records:
        c = r["comm_bytes_per_sample"]
        B, M = r["micro_batch"], r["micro_batches"]
        rows.append({"schedule": label(r), "dtype": r["dtype"], "micro_batch": B,
                     "cut (blocks per stage)": " | ".join(f"{b[0]}-{b[-1]}" for b in stage_plan(r)["blocks"]),
                     "fwd MB/sample": c["forward"] / MB, "bwd MB/sample": c["backward"] / MB,
                     "total MB/micro-batch": (c["forward"] + c["backward"]) * B / MB,
                     "total MB/step": (c["forward"] + c["backward"]) * B * M / MB,
                     "paper MB (setup unknown)": paper.get(r["schedule"], math.nan)})
    return pd.DataFrame(rows)


def comm_sizes_frame(records: list[dict]):
    """Bytes crossing the stage boundaries per step, one row per (schedule, processors,
    micro-batch size): ``forward_MB``, ``backward_MB`` and ``total_MB`` per step of
    ``micro_batches`` micro-batches (from :func:`paper_repro.distributed.bench.comm_only`)."""
    rows = []
    for r in records:
        c = r["comm_bytes_per_sample"]
        per_step = r["micro_batch"] * r["micro_batches"] / MB
        rows.append({"schedule": label(r), "processors": r["stages"], "micro_batch": r["micro_batch"],
                     "micro_batches": r["micro_batches"], "dtype": r["dtype"],
                     "forward_MB": c["forward"] * per_step, "backward_MB": c["backward"] * per_step,
                     "total_MB": (c["forward"] + c["backward"]) * per_step})
    return pd.DataFrame(rows)


def runs_frame(runs: dict[str, list[dict]]):
    """Throughput of stored benchmark runs, one row per (run, schedule, micro-batch size):
    the median ``samples_per_s`` and its range over the run's repeats (``lo``, ``hi``).
    ``runs`` maps a run's name to its records (``paper-repro bench pipeline --json``)."""
    rows = []
    for name, records in runs.items():
        if not all("samples_per_s_runs" in r for r in records):  # one record per repeat
            records = median_records(records)
        for r in records:
            values = r.get("samples_per_s_runs") or [r["samples_per_s"]]
            rows.append({"run": name, "model": r["model"], "model_kwargs": r.get("model_kwargs") or {},
                         "image_size": r.get("image_size"), "schedule": label(r), "micro_batch": r["micro_batch"],
                         "samples_per_s": r["samples_per_s"], "lo": min(values), "hi": max(values),
                         "repeats": len(values)})
    return pd.DataFrame(rows)
