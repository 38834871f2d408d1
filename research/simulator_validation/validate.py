"""The simulator against real runs: ``bench pipeline`` and the simulation, side by side.

For every number of stages, micro-batch size and schedule that ``bench pipeline`` runs (local,
GPipe, 1F1B, 1F1B with recomputation), the real pipeline runs (``stages`` local processes),
the blocks are calibrated in this process with the threads each stage process gets, and the
simulator predicts the same run on the same cut. The check is on **throughput ratios to
1F1B** (what the paper's claim is about; absolute samples/s move with the machine's load
more than ratios do) and on the memory each stage holds for backward (meta-device accounting
vs the runs' saved-tensor meters).

    python -m research.simulator_validation.validate --model resnet18 --model-kwargs '{"width": 16}' \
        --stages 2 --micro-batch 8,16,32 --repeats 5 --link auto --validate out/validation
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import platform
import re
import shlex
import statistics
import sys
import time
import warnings
from pathlib import Path

import pandas as pd
import torch

from paper_repro import methods
from paper_repro.cli import add_simulate
from paper_repro.cliargs import float_list, non_negative_int, positive_int
from paper_repro.simulate import api
from paper_repro.distributed.config import PipelineConfig
from paper_repro.distributed.bench import run_pipeline
from paper_repro.distributed.report import median_records
from paper_repro.hardware import hardware_label
from paper_repro.names import LOCAL_SCHEDULES
from paper_repro.report_table import stage_plan
from paper_repro.simulate.calibrate import measure
from paper_repro.simulate.costs import fresh_share, schedule_costs
from paper_repro.simulate.engine import Link, simulate
from paper_repro.simulate.memory import MetaNet, stage_memory
from .linkcal import measure_link
from .replay import CPU_MALLOC_ENV, Job, StageTimes, replay, replay_costs
from paper_repro.simulate.schedules import check_schedule

REAL_SCHEDULES = ("local", "gpipe", "1f1b", "1f1b-recompute")
TOLERANCE = 0.15    # the goal: simulated throughput ratios to 1F1B within 15% of the measured ones
_NOTE_LINK = re.compile(r"link ([0-9.]+) us \+ bytes / ([0-9.]+) GB/s")


def compare(base: PipelineConfig, stages: list[int], micro_batch_sizes: list[int], schedules: list[str],
            repeats: int = 1, reps: int = 3, link: Link | None = None, timeout: float | None = None,
            replay_rounds: int = 0, in_situ: bool = False, coupled: bool = False) -> pd.DataFrame:
    """One row per (stages, micro-batch size, schedule): measured and simulated samples/s, their
    ratios to 1F1B, and the largest relative error of the saved-for-backward bytes over stages
    (``replay_rounds``, ``in_situ``, ``coupled``: see :func:`against`)."""
    schedules = [check_schedule(s) for s in schedules]
    runnable = [s for s in schedules if s in REAL_SCHEDULES]
    if "1f1b" not in runnable:
        runnable.append("1f1b")
    M = base.micro_batches
    update_every = [base.update_every]
    if "local/M" in schedules:       # the real local pipeline stepping once per step
        if "local" not in runnable:
            runnable.insert(0, "local")
        update_every = sorted({base.update_every, M}) if "local" in schedules else [M]
    records = []
    for S in stages:
        # every (repeat, size, schedule) interleaved, so that a change of load touches all alike
        configs = [dataclasses.replace(base, stages=S, schedule=s, micro_batch=B, update_every=u).validate()
                   for _ in range(repeats) for B in micro_batch_sizes for s in runnable
                   for u in (update_every if s == "local" else [1])]
        runs = run_pipeline(configs, timeout=timeout, progress=False)
        for r in runs:      # the stage processes inherit this process's environment, glibc's settings too
            r.setdefault("malloc_env", {k: os.environ[k] for k in CPU_MALLOC_ENV if k in os.environ})
        records += median_records(runs) if repeats > 1 else runs
    df = against(records, reps=reps, link=link, replay_rounds=replay_rounds, in_situ=in_situ, coupled=coupled)
    df.attrs["records"] = records       # the real runs, to simulate again later (--validate-against)
    return df


def against(records: list[dict], reps: int = 3, link: Link | None = None, replay_rounds: int = 0,
            in_situ: bool = False, coupled: bool = False) -> pd.DataFrame:
    """Simulate the runs of ``bench pipeline`` records (measured earlier, e.g. a committed JSON)
    with costs calibrated now, on the same cuts: the table :func:`compare` returns.

    Every stage's forward, backward and optimizer times come from the per-block calibration, or:

    * ``replay_rounds=k``: from a replay of the run's compute in its schedule's order
      (:mod:`.replay`, median of ``k`` rounds; ``coupled``: each action waiting for the neighbour's
      action it depends on);
    * ``in_situ``: from the run itself (its stages' ``forward_backward`` and ``optimizer``
      phases). Not a prediction: a check of the engine and the link model alone, given the
      durations the run had.
    """
    if replay_rounds and in_situ:
        raise ValueError("give replay rounds or in-situ durations, not both")
    if coupled and not replay_rounds:
        raise ValueError("coupled applies to a replay: give replay rounds too")
    # the simulated local schedule holds one local module per stage (the paper's setting)
    skipped = [f"{r['schedule']} {r.get('method')} micro-batch {r['micro_batch']}" for r in records
               if r["schedule"] in LOCAL_SCHEDULES and not _one_module_per_stage(r)]
    records = [r for r in records if r["schedule"] in (*REAL_SCHEDULES, "local/M") and not r.get("comm_only")
               and not (r["schedule"] in LOCAL_SCHEDULES and not _one_module_per_stage(r))]
    if not any(r["schedule"] == "1f1b" for r in records):
        raise ValueError("the records hold no 1f1b run, the reference of every ratio")
    rows = []
    metas, calibrations = {}, {}
    jobs = [record_job(r) for r in records]
    replayed = _replay(records, jobs, replay_rounds, coupled) if replay_rounds else {}
    for r, job in zip(records, jobs):
        S, B, M, schedule, every = (r["stages"], r["micro_batch"], r["micro_batches"], job.schedule,
                                    r.get("update_every") or 1)
        base = dataclasses.replace(job.cfg, method=None, update_every=1)     # the model, for calibration and memory
        key = (r["model"], str(r["model_kwargs"]), base.image_size, S)
        if key not in metas:
            metas[key] = MetaNet(base)
        if key + (B,) not in calibrations:
            calibrations[key + (B,)] = measure(base, reps=reps)
        cut = stage_plan(r)["blocks"]
        calibrated = calibrations[key + (B,)]
        if r.get("input_prefetch"):     # drawn ahead in a thread: off the first stage's path
            calibrated = calibrated.without_input()
        costs = schedule_costs(calibrated, schedule, S, blocks=cut, fresh=fresh_share(schedule, M, every))
        if replayed:
            costs = replay_costs(replayed[key][job.key()], costs, recompute=schedule.endswith("-recompute"))
        elif in_situ:
            costs = replay_costs(in_situ_times(r, costs, schedule.endswith("-recompute")), costs,
                                 recompute=schedule.endswith("-recompute"))
        sim = simulate(schedule, costs, M, B, link=link, steps=base.steps, warmup_steps=base.warmup_steps,
                       update_every=every, max_in_flight=r.get("max_in_flight", base.max_in_flight))
        mem = stage_memory(metas[key], schedule, S, B, M, cut, base.optimizer, base.max_in_flight)
        saved_err, peak_err = memory_errors(mem, r["memory_per_stage"])
        rows.append({"model": r["model"], "stages": S, "micro_batch": B, "schedule": schedule,
                     "measured_samples_per_s": r["samples_per_s"], "simulated_samples_per_s": sim.samples_per_s,
                     "measured_runs": r.get("samples_per_s_runs", [r["samples_per_s"]]),
                     "measured_busy": _mean(r.get("busy_fraction_per_stage")),
                     "simulated_busy": _mean(sim.busy_per_stage),
                     "saved_bytes_max_rel_error": saved_err, "peak_bytes_max_rel_error": peak_err})
    df = pd.DataFrame(rows)
    keys = ["stages", "micro_batch"]
    ref = df[df.schedule == "1f1b"].set_index(keys)
    for col in ("measured", "simulated"):
        reference = df.set_index(keys).index.map(ref[f"{col}_samples_per_s"])
        df[f"{col}_ratio_vs_1f1b"] = df[f"{col}_samples_per_s"].to_numpy() / reference.to_numpy()
    df["ratio_rel_error"] = df.simulated_ratio_vs_1f1b / df.measured_ratio_vs_1f1b - 1
    spread = [paired_ratios(runs, ref.loc[(row.stages, row.micro_batch), "measured_runs"])
              for row, runs in zip(df.itertuples(), df.measured_runs)]
    df["measured_ratio_min"] = [min(r) for r in spread]
    df["measured_ratio_max"] = [max(r) for r in spread]
    df["within_15pct"] = df.ratio_rel_error.abs() <= TOLERANCE
    df["within_repeats"] = ((df.simulated_ratio_vs_1f1b >= df.measured_ratio_min - 1e-12)
                            & (df.simulated_ratio_vs_1f1b <= df.measured_ratio_max + 1e-12))
    df.attrs["skipped"] = skipped
    df.attrs["malloc_env"] = sorted({json.dumps(r.get("malloc_env"), sort_keys=True) for r in records})
    return df


def memory_errors(accounted: list[dict], measured: list[dict]) -> tuple[float, float]:
    """Largest relative error over the stages of (saved-for-backward bytes, peak bytes), the
    accounting against a record's ``memory_per_stage``. Saved bytes are metered on CPU runs only
    (NaN when no stage has them); peaks are compared only where the device's allocator measured
    them (CUDA; NaN otherwise: a CPU record's peak is itself an accounting)."""
    saved = [abs(a["saved_for_backward"] / m["saved_for_backward"] - 1)
             for a, m in zip(accounted, measured) if m.get("saved_for_backward")]
    peak = [abs(a["peak_bytes"] / m["peak_bytes"] - 1) for a, m in zip(accounted, measured)
            if str(m.get("method", "")).startswith("cuda") and m.get("peak_bytes")]
    return (max(saved) if saved else float("nan")), (max(peak) if peak else float("nan"))


def record_job(r: dict) -> Job:
    """The replay of a ``bench pipeline`` record's run (also the settings the simulation uses)."""
    S, M, every = r["stages"], r["micro_batches"], r.get("update_every") or 1
    cfg = PipelineConfig(model=r["model"], model_kwargs=r["model_kwargs"], image_size=r.get("image_size", 32),
                         stages=S, micro_batch=r["micro_batch"], micro_batches=M, steps=r.get("steps", 3),
                         warmup_steps=r.get("warmup_steps", 1), optimizer=r.get("optimizer", "adam"),
                         dtype=r.get("dtype", "float32"), num_classes=r.get("num_classes", 10),
                         seq_len=r.get("seq_len", 64), threads=r.get("threads_per_process"),
                         device=r.get("device", "cpu"), method=r.get("method") if r["schedule"] in LOCAL_SCHEDULES else None,
                         update_every=every if r["schedule"] in LOCAL_SCHEDULES else 1)
    return Job(cfg, record_schedule(r), tuple(tuple(b) for b in stage_plan(r)["blocks"]))


def record_schedule(r: dict) -> str:
    """The simulator's name for a ``bench pipeline`` record's schedule: the local pipeline stepping
    once per step (``update_every`` = micro-batches per step) is ``local/M`` (as newer records
    name it themselves)."""
    M, every = r["micro_batches"], r.get("update_every") or 1
    return "local/M" if r["schedule"] == "local" and every == M and M > 1 else r["schedule"]


def in_situ_times(record: dict, calibrated, recompute: bool) -> list[StageTimes]:
    """Each stage's mean forward, backward and optimizer step in a ``bench pipeline`` run, from its
    timed phases (and the first stage's input drawing, per micro-batch); the forward+backward is
    split between the two as the run measured it (``compute_split_s``), or else as the
    calibration splits it. CUDA runs time their phases with CUDA events (``phase_clock``); older
    CUDA records timed kernel launches on the host, so their split between forward+backward and
    optimizer is approximate (a warning says so)."""
    per_stage = record["per_stage"]
    per_stage = ast.literal_eval(per_stage) if isinstance(per_stage, str) else per_stage
    if record.get("device") == "cuda" and not all("CUDA events" in st.get("phase_clock", "") for st in per_stage):
        warnings.warn("in-situ durations of a CUDA run whose phases were timed on the host: they time kernel "
                      "launches, synchronized once per micro-batch or step, so the forward+backward / "
                      "optimizer split is approximate (their sum is not)", stacklevel=2)
    n = record["steps"] * record["micro_batches"]
    opt_steps = record["steps"] * (record.get("optimizer_steps_per_step") or 1)
    out = []
    for v, st in enumerate(per_stage):
        fb = st["phases_s"]["forward_backward"] / n
        if "compute_split_s" in st:     # the run timed its forwards apart (torch's schedules)
            forward = st["compute_split_s"]["forward"] / n
        else:
            f = calibrated.forward[v]
            whole = f * (2 if recompute else 1) + calibrated.backward(v)
            forward = fb * f / whole if whole > 0 else 0.0
        data = st["phases_s"].get("data", 0.0) / n if v == 0 else None
        out.append(StageTimes(forward, fb - forward, st["phases_s"]["optimizer"] / opt_steps, data))
    return out


def _replay(records: list[dict], jobs: list[Job], rounds: int, coupled: bool = False) -> dict:
    """Replays of every record's run, grouped by model and number of stages (one set of stage
    processes each), with the glibc malloc settings the runs had."""
    groups: dict[tuple, list[tuple[dict, Job]]] = {}
    for r, job in zip(records, jobs):
        groups.setdefault((r["model"], str(r["model_kwargs"]), job.cfg.image_size, r["stages"]), []).append((r, job))
    out = {}
    for key, members in groups.items():
        envs = {json.dumps(r.get("malloc_env") or {}, sort_keys=True) for r, _ in members}
        if len(envs) > 1:
            raise ValueError(f"runs of {key[0]} on {key[3]} stages had different malloc settings {sorted(envs)}; "
                             "replay them separately")
        unique = list({job.key(): job for _, job in members}.values())
        print(f"replaying {len(unique)} runs of {key[0]} on {key[3]} stages, {rounds} round(s) ...", flush=True)
        out[key] = replay(unique, rounds=rounds, malloc_env=json.loads(envs.pop()), coupled=coupled)
    return out


def paired_ratios(runs: list[float], reference_runs: list[float]) -> list[float]:
    """A schedule's samples/s over 1F1B's, repeat by repeat: the repeats of ``bench pipeline`` are
    interleaved (repeat k of every schedule runs before repeat k + 1 of any), so repeat k of the two
    saw the same load. The spread of these ratios is the measurement's own noise. Without paired
    repeats (different counts), the ratio of the medians alone."""
    if len(runs) != len(reference_runs) or not runs:
        return [statistics.median(runs) / statistics.median(reference_runs)]
    return [a / b for a, b in zip(runs, reference_runs)]


def _mean(values) -> float:
    """Mean of a list of busy fractions (NaN when a record has none)."""
    return statistics.fmean(values) if values else float("nan")


def _one_module_per_stage(record: dict) -> bool:
    """Whether a local run's method is chunked into as many modules as stages: ``chunked-S``, or
    ``chunked@...`` with S - 1 cut points (the cut balancing measured time); older records
    without a method ran chunked-S."""
    method = record.get("method") or f"chunked-{record['stages']}"
    return methods.parse_spec(method) == ("chunked", record["stages"])


def table_link(runs: str | Path) -> Link:
    """The link a validation table was simulated with, as its note (``PATH.md`` beside the
    ``PATH.runs.json`` of its real runs) gives it."""
    md = Path(str(runs).removesuffix(".runs.json") + ".md")
    found = _NOTE_LINK.search(md.read_text())
    if not found:
        raise ValueError(f"{md} names no link (latency us + bytes / GB/s)")
    return Link(float(found[1]) * 1e-6, float(found[2]) * 1e9)


def machine_note(device: str = "cpu") -> str:
    """The hardware, torch and the load average; on ``cuda`` the GPUs first."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    load_s = f"1/5/15-min load average {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}" if load else "load unknown"
    gpus = (f"{torch.cuda.device_count()} x {hardware_label('cuda')} (CUDA {torch.version.cuda}) with "
            if device == "cuda" and torch.cuda.is_available() else "")
    return f"{gpus}CPU x{cores} ({platform.machine()}), torch {torch.__version__}, {load_s}"


def write(df: pd.DataFrame, path: str | Path, note: str) -> tuple[Path, Path]:
    """The table as markdown (with ``note`` and the worst errors) and CSV next to it."""
    path = Path(path)
    md, csv = path.with_suffix(".md"), path.with_suffix(".csv")
    md.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(csv, index=False)
    cols = ["model", "stages", "micro_batch", "schedule", "measured_samples_per_s", "simulated_samples_per_s",
            "measured_ratio_vs_1f1b", "measured_ratio_min", "measured_ratio_max", "simulated_ratio_vs_1f1b",
            "ratio_rel_error", "within_15pct", "within_repeats", "measured_busy", "simulated_busy",
            "saved_bytes_max_rel_error"]
    if "peak_bytes_max_rel_error" in df and df.peak_bytes_max_rel_error.notna().any():
        cols.append("peak_bytes_max_rel_error")          # runs on a GPU: its allocator's peak
    lines = ["# Simulator vs real runs", "", note, "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df[cols].itertuples(index=False):
        lines.append("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row) + " |")
    worst = df.ratio_rel_error.abs().max()
    rows = df[df.schedule != "1f1b"]      # 1F1B's own ratio is 1 by construction
    memory = [f"largest error of a stage's {what}: {df[col].max():.2%}"
              for what, col in (("saved-for-backward bytes", "saved_bytes_max_rel_error"),
                                ("peak bytes against the allocator's", "peak_bytes_max_rel_error"))
              if col in df and df[col].notna().any()]
    lines += ["", f"Largest error of a throughput ratio to 1F1B: {worst:.1%}" + "".join(f"; {m}" for m in memory) + ".",
              f"Ratios to 1F1B (1F1B's own rows left out): {int(rows.within_15pct.sum())} of {len(rows)} within "
              f"{TOLERANCE:.0%} of the measured median (median error {rows.ratio_rel_error.abs().median():.1%}); "
              f"{int(rows.within_repeats.sum())} of {len(rows)} inside the range of the paired repeats' ratios "
              "(measured_ratio_min to measured_ratio_max: the run-to-run noise of the measurement itself).",
              "measured_busy / simulated_busy: the fraction of the timed window the stages spend computing, "
              "mean over stages (real runs: time inside forward, backward, loss and optimizer calls; the rest "
              "is waiting and the pipeline runtime's own work)."]
    md.write_text("\n".join(lines) + "\n")
    return md, csv


def validate(args, schedules: list[str]) -> int:
    """``--validate PATH``: run, compare, print and write the table."""
    base = PipelineConfig(model=args.model, model_kwargs=args.model_kwargs, image_size=args.image_size,
                          num_classes=args.num_classes, seq_len=args.seq_len, micro_batches=args.micro_batches,
                          steps=args.steps, warmup_steps=args.warmup_steps, update_every=args.update_every,
                          max_in_flight=args.max_in_flight, optimizer=args.optimizer, dtype=args.dtype,
                          device=args.device, threads=args.threads).validate()
    before = machine_note(args.device)
    t0 = time.time()
    durations = {"replay_rounds": getattr(args, "replay", 0), "in_situ": getattr(args, "in_situ", False),
                 "coupled": getattr(args, "coupled", False)}        # where the stage times come from
    link = Link(*args.link) if args.link else None
    link_s = (f"link {args.link[0] * 1e6:.1f} us + bytes / {args.link[1] / 1e9:.2f} GB/s" if args.link
              else "communication free (no link model)")
    if args.validate_against:
        path = Path(args.validate_against)
        try:
            records = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"--validate-against {str(path)!r}: not a readable bench pipeline JSON ({err})") from None
        df = against(records, reps=args.reps, link=link, **durations)
        hw = sorted({str(r.get("hardware")) for r in records})
        note = (f"Real runs: the records of {path.name} (hardware {', '.join(hw)}; "
                f"{records[0].get('repeats', 1)} run(s) per row, median). Simulated with {link_s}, calibrated "
                f"now on {before} ({time.time() - t0:.0f} s). A load average near or above the core count "
                "means other jobs shared the machine while calibrating.")
    else:
        df = compare(base, args.stages, args.micro_batch, schedules, repeats=args.repeats, reps=args.reps,
                     link=link, **durations)
        note = (f"Simulated with {link_s}. Measured on {before} at the start and "
                f"{machine_note().split(', ', 2)[-1]} at the end "
                f"({time.time() - t0:.0f} s); {args.repeats} real run(s) per row (median), "
                f"{args.steps} timed steps of {args.micro_batches} micro-batches after {args.warmup_steps} "
                "warm-up step(s). A load average near or above the core count means other jobs shared the "
                "machine: measured throughputs then vary from run to run.")
    if durations["replay_rounds"]:
        note += (f" Every stage's forward, backward and optimizer times come from replaying its compute in the "
                 f"run's schedule order, all stages at once (median of {args.replay} rounds); the per-block "
                 "calibration gives only the split of the backward and the bytes sent.")
        if durations["coupled"]:
            note += (" Coupled: each replayed action waited for the neighbouring stage's action it depends on, "
                     "as in the real pipeline.")
    if durations["in_situ"]:
        note += (" Every stage's forward+backward and optimizer times are those the run itself measured (its "
                 "timed phases; the forward/backward split is the calibration's): not a prediction, a check of "
                 "the schedule engine and the link model alone.")
    if getattr(args, "command_line", None):
        note += f" Made with `{args.command_line}`."
    here = {k: os.environ[k] for k in CPU_MALLOC_ENV if k in os.environ}
    note += (f" glibc malloc settings of the stage processes: {', '.join(df.attrs['malloc_env'])} (null: not "
             f"recorded); of the calibrating process: {json.dumps(here, sort_keys=True)}.")
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(df.drop(columns=["measured_runs"]).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    for line in df.attrs.get("skipped", []):
        print(f"not simulated (local with several modules per stage): {line}")
    md, csv = write(df, args.validate, note)
    print(f"written to {md} and {csv}")
    if "records" in df.attrs:
        runs = md.with_suffix(".runs.json")
        runs.write_text(json.dumps(df.attrs["records"], indent=1))
        print(f"real runs written to {runs} (simulate them again with --validate-against {runs})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """``paper-repro simulate``'s options (``--link`` also takes ``auto``) and the validation's own."""
    top = argparse.ArgumentParser(prog="python -m research.simulator_validation.validate")
    sub = top.add_subparsers()
    add_simulate(sub)
    p = sub.choices["simulate"]
    p.prog, p.description = top.prog, __doc__.split("\n\n")[0]
    for action in p._actions:
        if action.dest == "link":
            action.type = float_list(2, 2, keywords=("auto",))
            action.help += ("; auto: measure it between two local processes that compute between messages, as "
                            "pipeline stages do (gloo; with --device cuda, NCCL between GPUs 0 and 1)")
    p.add_argument("--validate", required=True, metavar="PATH",
                   help="run the real pipelines (bench pipeline) and write measured vs simulated here (.md + .csv)")
    p.add_argument("--repeats", type=positive_int, default=1, help="--validate: real runs per configuration (medians)")
    p.add_argument("--validate-against", default=None, metavar="JSON",
                   help="--validate: take the real runs from this bench pipeline JSON instead of running them")
    p.add_argument("--replay", type=non_negative_int, default=0, metavar="K",
                   help="--validate: take every stage's forward, backward and optimizer times from replaying "
                        "each run's compute in its schedule's order, all stages at once (median of K rounds; "
                        "0: the per-block calibration alone)")
    p.add_argument("--coupled", action="store_true",
                   help="--replay: every replayed action also waits for the neighbouring stage's action it "
                        "depends on, as in the real pipeline (still nothing is sent)")
    p.add_argument("--in-situ", action="store_true",
                   help="--validate: simulate every run with the forward+backward and optimizer times its own "
                        "stages measured (not a prediction: a check of the schedule engine and link model alone)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.command_line = "python -m research.simulator_validation.validate " + shlex.join(argv)
    try:
        schedules = api.parse_schedules(args.schedule)
        if args.link == "auto":
            args.link = dataclasses.astuple(measure_link(device="cuda" if str(args.device).startswith("cuda")
                                                         else "cpu"))
            print(f"link measured between two local processes ({args.device}) computing between messages: "
                  f"latency {args.link[0] * 1e6:.1f} us, bandwidth {args.link[1] / 1e9:.2f} GB/s")
        if args.validate_against and not args.validate:
            raise ValueError("--validate-against needs --validate PATH (where the table goes)")
        return validate(args, schedules)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
