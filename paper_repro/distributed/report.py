"""Tables of the pipeline benchmark records: per-run lines, medians over repeats, the
throughput / busy / communication / memory targets, and tidy DataFrames for the figures of
:mod:`paper_repro.plots.pipeline`. The notebook's settings live in :mod:`paper_repro.settings`."""
from __future__ import annotations

import math
import statistics

import pandas as pd

MB = 1e6


def label(record: dict) -> str:
    """The schedule's name in tables and figures; ``local/N`` = local, optimizer step every N micro-batches."""
    u = record.get("update_every", 1)
    return record["schedule"] if record["schedule"] != "local" or u == 1 else f"local/{u}"


def median_records(records: list[dict]) -> list[dict]:
    """One record per (schedule, micro-batch size): the median throughput and busy fractions over
    repeats (``repeats`` and ``samples_per_s_runs`` say how many and what they were); bytes and
    memory do not change between repeats."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((label(r), r["micro_batch"]), []).append(r)
    out = []
    for runs in groups.values():
        first = dict(runs[0])
        first["samples_per_s_runs"] = [r["samples_per_s"] for r in runs]
        first["samples_per_s"] = statistics.median(first["samples_per_s_runs"])
        first["busy_fraction_per_stage"] = [statistics.median(r["busy_fraction_per_stage"][s] for r in runs)
                                            for s in range(first["stages"])]
        first["repeats"] = len(runs)
        out.append(first)
    return out


def _kb(x) -> str:
    return "-" if x is None else f"{x / 1e3:.4g}"


def format_table(records: list[dict]) -> str:
    """One line per run: throughput, busy fraction per stage, bytes per sample, peak memory per stage."""
    head = (f"{'schedule':<15} {'mb':>4} {'samples/s':>10} {'busy per stage':>18} {'fwd kB/sample':>14} "
            f"{'bwd kB/sample':>14} {'peak MB per stage':>24}")
    lines = [head, "-" * len(head)]
    for r in records:
        sps = r.get("samples_per_s")
        busy = r.get("busy_fraction_per_stage")
        mem = r.get("peak_mem_bytes_per_stage")
        comm = r["comm_bytes_per_sample"]
        lines.append(
            f"{label(r):<15} {r['micro_batch']:>4} {('-' if sps is None else f'{sps:.1f}'):>10} "
            f"{('-' if not busy else ' '.join(f'{b:.2f}' for b in busy)):>18} {_kb(comm['forward']):>14} "
            f"{_kb(comm['backward']):>14} {('-' if not mem else ' '.join(f'{m / MB:.3g}' for m in mem)):>24}")
    return "\n".join(lines)


def targets(records: list[dict]) -> list[dict]:
    """The benchmark's targets (throughput ratios, busy fraction, bytes and memory ratios), per
    micro-batch size, from runs measured side by side."""
    by_mb: dict[int, dict[str, dict]] = {}
    for r in records:
        by_mb.setdefault(r["micro_batch"], {})[label(r)] = r
    rows = []
    for mb, runs in sorted(by_mb.items()):
        for name in sorted(n for n in runs if n.startswith("local/")):  # same optimizer steps as the baselines
            sps = runs[name]["samples_per_s"]
            if "1f1b-recompute" in runs:
                ratio = sps / runs["1f1b-recompute"]["samples_per_s"]
                rows.append(dict(micro_batch=mb, target=f"throughput {name} / 1F1B+recompute", goal=">= 1.30",
                                 value=ratio, met=ratio >= 1.3))
            plain = [runs[s]["samples_per_s"] for s in ("gpipe", "1f1b") if s in runs]
            if plain:
                ratio = sps / max(plain)
                rows.append(dict(micro_batch=mb, target=f"throughput {name} / best(GPipe, 1F1B)", goal=">= 1.00",
                                 value=ratio, met=ratio >= 1.0))
        local = runs.get("local")
        if local is None:
            continue
        sps = local["samples_per_s"]
        if "1f1b-recompute" in runs:
            ratio = sps / runs["1f1b-recompute"]["samples_per_s"]
            rows.append(dict(micro_batch=mb, target="throughput local / 1F1B+recompute", goal=">= 1.30",
                             value=ratio, met=ratio >= 1.3))
        plain = [runs[s]["samples_per_s"] for s in ("gpipe", "1f1b") if s in runs]
        if plain:
            ratio = sps / max(plain)
            rows.append(dict(micro_batch=mb, target="throughput local / best(GPipe, 1F1B)", goal=">= 1.00",
                             value=ratio, met=ratio >= 1.0))
        busy = min(local["busy_fraction_per_stage"])
        rows.append(dict(micro_batch=mb, target="busy fraction of the least busy local stage", goal=">= 0.90",
                         value=busy, met=busy >= 0.9))
        bp = next((runs[s] for s in ("1f1b", "gpipe", "1f1b-recompute") if s in runs), None)
        if bp is not None:
            ours = sum(local["comm_bytes_per_sample"].values())
            theirs = sum(bp["comm_bytes_per_sample"].values())
            ratio = ours / theirs
            rows.append(dict(micro_batch=mb, target="comm bytes local / pipelined backprop", goal="= 0.50",
                             value=ratio, met=abs(ratio - 0.5) < 0.005))
        if "1f1b-recompute" in runs:
            mine, theirs = local["peak_mem_bytes_per_stage"], runs["1f1b-recompute"]["peak_mem_bytes_per_stage"]
            worst = max(a / b for a, b in zip(mine, theirs))
            rows.append(dict(micro_batch=mb, target="peak memory local / 1F1B+recompute (worst stage)",
                             goal="<= 1.00", value=worst, met=worst <= 1.0))
    return rows


def markdown_table(records: list[dict]) -> str:
    """The run table as Markdown (for the README)."""
    lines = ["| schedule | micro-batch | samples/s (median; runs) | busy per stage | fwd kB/sample | "
             "bwd kB/sample | peak MB per stage |", "|---|---:|---|---|---:|---:|---|"]
    for r in records:
        runs = r.get("samples_per_s_runs") or [r["samples_per_s"]]
        comm = r["comm_bytes_per_sample"]
        lines.append(f"| {label(r)} | {r['micro_batch']} | **{r['samples_per_s']:.1f}** "
                     f"({', '.join(f'{v:.0f}' for v in runs)}) | "
                     f"{' / '.join(f'{b:.2f}' for b in r['busy_fraction_per_stage'])} | {comm['forward'] / 1e3:.2f} | "
                     f"{comm['backward'] / 1e3:.2f} | "
                     f"{' / '.join(f'{m / MB:.1f}' for m in r['peak_mem_bytes_per_stage'])} |")
    return "\n".join(lines)


def markdown_targets(rows: list[dict]) -> str:
    lines = ["| micro-batch | target | goal | measured | |", "|---:|---|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['micro_batch']} | {r['target']} | {r['goal']} | {r['value']:.3f} | "
                     f"{'met' if r['met'] else '**missed**'} |")
    return "\n".join(lines)


def format_targets(rows: list[dict]) -> str:
    lines = [f"{'mb':>4}  {'target':<50} {'goal':>8} {'measured':>9}  result"]
    for r in rows:
        lines.append(f"{r['micro_batch']:>4}  {r['target']:<50} {r['goal']:>8} {r['value']:>9.3f}  "
                     f"{'met' if r['met'] else 'MISSED'}")
    return "\n".join(lines)


def to_frame(records: list[dict]):
    """A tidy DataFrame: one row per (run, stage)."""
    rows = []
    for r in records:
        mems = r.get("peak_mem_bytes_per_stage") or [math.nan] * r["stages"]
        busy = r.get("busy_fraction_per_stage") or [math.nan] * r["stages"]
        for s in range(r["stages"]):
            rows.append({"schedule": label(r), "micro_batch": r["micro_batch"], "stage": s,
                         "samples_per_s": r.get("samples_per_s"), "busy_fraction": busy[s],
                         "peak_mem_MB": mems[s] / MB,
                         "fwd_MB_per_sample": r["comm_bytes_per_sample"]["forward"] / MB,
                         "bwd_MB_per_sample": r["comm_bytes_per_sample"]["backward"] / MB})
    return pd.DataFrame(rows)


def comm_frame(records: list[dict]):
    """The communication table (one row per schedule) with the paper's figures beside ours."""
    paper = {"local": 43.2, "gpipe": 86.4, "1f1b": 86.4, "1f1b-recompute": 86.4}
    rows = []
    for r in records:
        c = r["comm_bytes_per_sample"]
        B, M = r["micro_batch"], r["micro_batches"]
        rows.append({"schedule": r["schedule"], "dtype": r["dtype"], "micro_batch": B,
                     "split (blocks per stage)": " | ".join(f"{b[0]}-{b[-1]}" for b in r["split"]["blocks"]),
                     "fwd MB/sample": c["forward"] / MB, "bwd MB/sample": c["backward"] / MB,
                     "total MB/micro-batch": (c["forward"] + c["backward"]) * B / MB,
                     "total MB/step": (c["forward"] + c["backward"]) * B * M / MB,
                     "paper MB (setup unknown)": paper.get(r["schedule"], math.nan)})
    return pd.DataFrame(rows)
