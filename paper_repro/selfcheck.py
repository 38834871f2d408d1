"""A self-check for a machine meeting the project for the first time (typically one GPU).

    python -m paper_repro.selfcheck --device cuda --json selfcheck.json --time-limit 600

Each piece runs in its own process (a hung CUDA call or a crash ends that piece, not the
check), bounded by its share of ``--time-limit``; the report holds, per piece, ``status``
(pass | fail | skip), its numbers and one error line:

* ``environment``  torch, CUDA and the devices seen.
* ``overhead``     the learner's backprop step vs a hand-written loop on the device
                   (:func:`paper_repro.overhead.overhead`); the median time ratio.
* ``pipeline``     the local pipeline as processes, one stage per process: gloo on CPU
                   (2 stages), nccl on CUDA with one stage per GPU; throughput and busy time.
* ``baseline``     in the same launch, the pipelined-backprop baseline (1F1B with
                   recomputation). NCCL allows one process per GPU and 1F1B needs 2 stages, so
                   on a single GPU the local pipeline runs as one stage and this is skipped.
* ``memory``       per stage of that local pipeline: the allocator's measured peak
                   (``cuda.max_memory_allocated``) against the CPU accounting of the same stage
                   (saved-for-backward + parameters + gradients + optimizer state); passes when
                   measured / accounted lies in [0.5, 4] (a sanity bound, not an equality: the
                   allocator also holds the input batch, workspaces and temporaries). On CPU
                   there is nothing to measure against: skip, with the accounting reported.
* ``bf16``         the quick-profile MLP trained with chunked-2 under bf16 autocast next to the
                   same run in float32: both must be finite and learn.
* ``notebook``     one quick-profile notebook executed through Papermill with ``device`` set.

Exit status 0 when nothing failed (skips allowed), 1 otherwise.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from . import overhead as learner_overhead
from . import settings, train
from .distributed.config import PipelineConfig
from .distributed.bench import run_pipeline
from .distributed.inputs import data_spec
from .distributed.timing import chunk_cut
from .simulate.memory import MetaNet, stage_memory

DEVICES = ("cpu", "cuda")
PIECES = ("environment", "overhead", "pipeline", "baseline", "memory", "bf16", "notebook")
RUNS = ("environment", "overhead", "pipeline", "bf16", "notebook")  # baseline, memory: the pipeline's run
SHARE = {"environment": 0.05, "overhead": 0.1, "pipeline": 0.4, "bf16": 0.1, "notebook": 0.35}
MIN_PIECE_S = 30.0    # at least this per piece (time left allowing): a first CUDA start alone can take 10 s
MEMORY_RATIO = (0.5, 4.0)
NOTEBOOK = "01_compute_efficiency"  # a quick-profile notebook with a ``device`` parameter
REPO_ROOT = Path(__file__).resolve().parent.parent


class Skip(Exception):
    """The piece cannot run here; the message says why. Numbers may ride along."""

    def __init__(self, reason: str, numbers: dict | None = None):
        super().__init__(reason)
        self.numbers = numbers or {}


# -- the pieces: each returns its numbers, raises Skip, or raises anything for a failure ----------
def environment(device: str) -> dict:
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    out = {"torch": torch.__version__, "cuda_build": torch.version.cuda, "cuda_devices": n,
           "nccl": _nccl_version() if n else None,
           "devices": [torch.cuda.get_device_name(i) for i in range(n)]}
    if device == "cuda" and n == 0:
        raise RuntimeError(f"device 'cuda' asked for but torch {torch.__version__} (CUDA {torch.version.cuda}) "
                           f"sees no GPU; check the NVIDIA driver (>= 580 for CUDA 13) or docker run --gpus all")
    return out


def _nccl_version() -> str:
    v = torch.cuda.nccl.version()
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def overhead(device: str) -> dict:
    r = learner_overhead.overhead("mlp", dict(depth=4, width=1024, in_dim=3072), batch_size=128,
                       steps=2 if device == "cpu" else 20, repeats=3 if device == "cpu" else 7,
                       warmup=1 if device == "cpu" else 5, device=device)
    if not all(math.isfinite(r[k]) and r[k] > 0 for k in ("plain_s", "learner_s", "ratio")):
        raise RuntimeError(f"timings are not positive finite numbers: {r}")
    return {k: r[k] for k in ("ratio", "ratio_min", "ratio_max", "plain_s", "learner_s", "repeats", "device")}


def pipeline_configs(device: str, stages: int) -> list[PipelineConfig]:
    """The local pipeline, and with 2+ stages the 1F1B-with-recomputation baseline, on an MLP
    deep enough for one local module (two blocks) per stage, cut by times measured on the device
    (on a GPU, its first: the measured cut's own check)."""
    common = dict(model="mlp", model_kwargs=dict(depth=max(4, 2 * stages), width=1024), stages=stages,
                  cut="time",
                  micro_batch=64, micro_batches=max(4, stages), steps=2, warmup_steps=1, device=device,
                  timeout=60.0, init_timeout=60.0)
    schedules = ["local"] + (["1f1b-recompute"] if stages >= 2 else [])
    return [PipelineConfig(schedule=s, **common) for s in schedules]


def pipeline(device: str) -> dict:
    stages = 2 if device == "cpu" else torch.cuda.device_count()
    records = run_pipeline(pipeline_configs(device, stages), timeout=240, progress=False)
    numbers = {"backend": "gloo" if device == "cpu" else "nccl", "stages": stages}
    if stages < 2:      # one GPU runs one stage, which needs no cut: time a two-stage cut on it anyway
        probe = pipeline_configs(device, 2)[0]
        numbers["two_stage_cut_timed_on_device"] = chunk_cut(probe, data_spec(probe)[1])
    for r in records:
        if not (r["samples_per_s"] and r["samples_per_s"] > 0):
            raise RuntimeError(f"schedule {r['schedule']}: no throughput measured ({r['samples_per_s']!r})")
        numbers[r["schedule"]] = {"samples_per_s": r["samples_per_s"],
                                  "busy_fraction_per_stage": r["busy_fraction_per_stage"],
                                  "memory_per_stage": r["memory_per_stage"], "cut": r["stage_plan"]["blocks"]}
    return numbers


def baseline(pipeline_result: dict) -> dict:
    """The pipelined-backprop baseline's piece, read from the pipeline's run."""
    numbers = pipeline_result["numbers"]
    result = {"piece": "baseline", "status": "pass", "seconds": 0.0,
              "numbers": {"1f1b-recompute": numbers.get("1f1b-recompute")}, "error": None}
    if numbers.get("1f1b-recompute") is not None:
        return result
    if pipeline_result["status"] == "fail":
        reason = f"the pipeline run it is part of failed ({pipeline_result['error']})"
    else:
        reason = (f"1F1B needs 2 stages and NCCL allows one process per GPU: {numbers.get('stages')} "
                  f"GPU(s) here, so only the local pipeline ran (as one stage)")
    return dict(result, status="skip", numbers={}, error=reason)


def memory(pipeline_result: dict, device: str) -> dict:
    """The memory piece, read from the local pipeline's stages in ``pipeline_result``."""
    local = pipeline_result["numbers"].get("local")
    if local is None:
        return {"piece": "memory", "status": "skip", "seconds": 0.0, "numbers": {},
                "error": f"the pipeline run it reads did not finish ({pipeline_result['error']})"}
    stages, problems = [], []
    accounting = local_accounting(pipeline_result["numbers"]["stages"], local["cut"], device)
    for i, st in enumerate(local["memory_per_stage"]):
        # the whole accounting on the meta device (saved tensors, parameters, gradients, optimizer
        # state, buffers, the passes' temporaries): a GPU run meters no saved tensors itself
        accounted = accounting[i]["peak_bytes"]
        row = {"stage": i, "accounted_bytes": accounted, "accounted_saved_for_backward":
               accounting[i]["saved_for_backward"], **{k: st[k] for k in
               ("saved_for_backward", "params", "grads", "optimizer", "method")}}
        if device == "cuda":
            row.update(measured_bytes=st["peak_bytes"], ratio=st["peak_bytes"] / accounted)
            if not MEMORY_RATIO[0] <= row["ratio"] <= MEMORY_RATIO[1]:
                problems.append(f"stage {i}: measured peak {st['peak_bytes']} B / accounted {accounted} B = "
                                f"{row['ratio']:.2f}, outside [{MEMORY_RATIO[0]}, {MEMORY_RATIO[1]}]")
        stages.append(row)
    status, error = ("fail", "; ".join(problems)) if problems else ("pass", None)
    if device != "cuda":
        status, error = "skip", "CPU has no allocator statistics to measure the accounting against"
    return {"piece": "memory", "status": status, "seconds": 0.0, "numbers": {"stages": stages}, "error": error}


def local_accounting(stages: int, cut: list[list[int]], device: str) -> list[dict]:
    """The memory accounting (:func:`paper_repro.simulate.memory.stage_memory`) of the local
    pipeline the pipeline piece ran, stage by stage."""
    cfg = dataclasses.replace(pipeline_configs(device, stages)[0], method=None)
    return stage_memory(MetaNet(cfg), "local", stages, cfg.micro_batch, cfg.micro_batches, cut, cfg.optimizer,
                        cfg.max_in_flight)


def bf16(device: str, steps: int = 60) -> dict:
    cfg = settings.quickstart_config("quick")
    cfg.method, cfg.device = "chunked-2", device
    data = train.load_data(cfg).to(device)
    out = {}
    for label, dtype in (("float32", None), ("bf16", torch.bfloat16)):
        learner = train.build_learner(cfg, data)
        opt = train.make_optimizer(cfg, learner.parameters())
        batches = data.sampler("train", cfg.batch_size, torch.Generator().manual_seed(0))
        losses = []
        for _ in range(steps):
            x, y = next(batches)
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device_type=device, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                step_losses = learner.losses(x, y)
            sum(step_losses).backward()
            opt.step()
            losses.append(float(step_losses[-1].detach()))
        first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
        if not all(math.isfinite(v) for v in losses) or not last < first:
            raise RuntimeError(f"{label} training did not learn: mean loss of the first 5 steps {first:.4f}, "
                               f"of the last 5 {last:.4f}")
        out[label] = {"first_loss": first, "last_loss": last}
    out["steps"] = steps
    return out


def notebook(device: str, timeout: float = 300) -> dict:
    src = REPO_ROOT / "notebooks" / f"{NOTEBOOK}.ipynb"
    if not src.is_file():
        raise Skip(f"{src} is not there (an installed package without the repository)")
    try:
        import papermill as pm      # only this piece needs it; the others run without Jupyter
    except ImportError as err:
        raise Skip(f"papermill is not installed ({err}); pip install papermill ipykernel") from None
    with tempfile.TemporaryDirectory(prefix="selfcheck-nb-") as tmp:
        t0 = time.perf_counter()
        pm.execute_notebook(str(src), str(Path(tmp) / src.name), kernel_name="python3", cwd=str(src.parent),
                            progress_bar=False, execution_timeout=timeout,
                            parameters=dict(profile="quick", device=device, figures_dir=str(Path(tmp) / "figures"),
                                            results_dir=str(Path(tmp) / "results")))
        figures = sorted(p.name for p in (Path(tmp) / "figures").glob("*.png"))
    if not figures:
        raise RuntimeError(f"{NOTEBOOK} ran but wrote no figure")
    return {"notebook": NOTEBOOK, "seconds": time.perf_counter() - t0, "figures": figures}


# -- running the pieces ---------------------------------------------------------------------------
def run_piece(name: str, device: str) -> dict:
    """Run one piece (one of RUNS) here, in this process; never raises."""
    t0 = time.perf_counter()
    try:
        numbers, status, error = globals()[name](device), "pass", None
    except Skip as s:
        numbers, status, error = s.numbers, "skip", str(s)
    except Exception as e:  # the report carries it; the other pieces go on
        numbers = {}
        lines = str(e).strip().splitlines()
        status, error = "fail", f"{type(e).__name__}: {lines[0] if lines else ''}"
    return {"piece": name, "status": status, "seconds": round(time.perf_counter() - t0, 2),
            "numbers": numbers, "error": error}


def selfcheck(device: str = "cuda", time_limit: float = 600, pieces=PIECES, json_path=None,
              echo=None) -> dict:
    """Run ``pieces`` one process each, piece p bounded by its share of ``time_limit``
    (unused time carries over); the report, also written to ``json_path`` if given."""
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; valid: {', '.join(DEVICES)}")
    unknown = [p for p in pieces if p not in PIECES]
    if unknown:
        raise ValueError(f"unknown piece(s) {', '.join(map(repr, unknown))}; valid: {', '.join(PIECES)}")
    if not time_limit > 0:
        raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
    deadline = time.monotonic() + time_limit
    runs = [p for p in RUNS if p in pieces or (p == "pipeline" and {"baseline", "memory"} & set(pieces))]
    results, share_left = {}, sum(SHARE[p] for p in runs)
    for name in runs:
        left = deadline - time.monotonic()
        limit = max(min(MIN_PIECE_S, left), left * SHARE[name] / share_left, 1.0)
        share_left -= SHARE[name]
        results[name] = _in_subprocess(name, device, limit)
        if name == "pipeline":
            results["baseline"] = baseline(results["pipeline"])
            results["memory"] = memory(results["pipeline"], device)
    ordered = [results[p] for p in PIECES if p in pieces]
    if echo:
        for r in ordered:
            echo(f"{r['piece']:<12} {r['status']:<5} {r['seconds']:7.1f} s  {r['error'] or ''}")
    report = {"device": device, "time_limit_s": time_limit, "torch": torch.__version__,
              "ok": all(r["status"] != "fail" for r in ordered), "pieces": ordered}
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2, default=str))
    return report


def _in_subprocess(name: str, device: str, limit: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="selfcheck-") as tmp:
        out = Path(tmp) / "piece.json"
        cmd = [sys.executable, "-m", "paper_repro.selfcheck", "--piece", name, "--device", device,
               "--result", str(out)]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, env={**os.environ, "MPLBACKEND": "Agg"})
        try:
            _, err = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the piece and whatever it started
            proc.communicate()
            return {"piece": name, "status": "fail", "seconds": round(time.perf_counter() - t0, 2),
                    "numbers": {}, "error": f"timed out after {limit:.0f} s (its share of the time limit)"}
        if out.is_file():  # seconds: the whole process, start-up included
            return dict(json.loads(out.read_text()), seconds=round(time.perf_counter() - t0, 2))
        tail = [line for line in err.strip().splitlines() if line.strip()]
        return {"piece": name, "status": "fail", "seconds": round(time.perf_counter() - t0, 2), "numbers": {},
                "error": f"exited with status {proc.returncode}: {tail[-1] if tail else 'no output'}"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m paper_repro.selfcheck", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=DEVICES)
    p.add_argument("--json", help="write the report here")
    p.add_argument("--time-limit", type=float, default=600, help="seconds for all pieces together")
    p.add_argument("--only", help=f"comma-separated pieces ({', '.join(PIECES)})")
    p.add_argument("--piece", help=argparse.SUPPRESS)   # internal: run one piece in this process
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.piece:
        if args.piece not in RUNS:
            p.error(f"unknown piece {args.piece!r}; valid: {', '.join(RUNS)}")
        Path(args.result).write_text(json.dumps(run_piece(args.piece, args.device), default=str))
        return 0
    pieces = PIECES if not args.only else [s.strip() for s in args.only.split(",") if s.strip()]
    try:
        report = selfcheck(args.device, args.time_limit, pieces, args.json, echo=print)
    except ValueError as e:
        p.error(str(e))
    print("self-check " + ("passed" if report["ok"] else "FAILED") + (f"; report in {args.json}" if args.json else ""))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
