"""Check the memory accounting against a device's own allocator, one stage at a time.

Each stage of a schedule is *emulated* in this one process on ``--device``: the stage's blocks
(and head) on real tensors, its micro-batches in the order torch's schedule runs them on that
rank (:func:`.schedules.torch_order`; local: forward and backward of every micro-batch in turn),
an optimizer step at the end (local: after every micro-batch). What a micro-batch holds follows
the accounting: from its forward to its backward, a receive buffer for its input (made when its
forward starts, as if just received), the stage's own copy of it, and (pipelined backprop, but
the last stage) a buffer for its output's gradient; the first stage of pipelined backprop
splits the whole step's batch and the last the step's labels, as torch's schedules do. (torch's
``PipelineStage`` itself allocates a receive buffer for every micro-batch of the step at set-up,
an implementation detail the accounting leaves out, like its first-step inference.) Garbage
from the stage emulated before is collected first. The second step is measured:

* always: the saved-for-backward peak (:class:`~paper_repro.distributed.memory.SavedTensorMeter`;
  with recomputation plus one micro-batch's saved bytes, which checkpointing hides from the
  meter, as the real runs count it) against :func:`.memory.stage_memory`'s ``saved_for_backward``;
* on CUDA also ``torch.cuda.max_memory_allocated`` over the step, less what was allocated
  before the stage was built (everything the caching allocator handed out, temporaries of the
  backward and cuDNN workspaces included) against ``peak_bytes`` (activations + parameters +
  gradients + optimizer state + message buffers), and apart the optimizer step's own
  temporaries (0 for the fused Adam that :func:`~paper_repro.build.make_optimizer` picks on CUDA).

No torch metadata inference runs here, so that term is left out of the prediction.

    python -m research.simulator_validation.gpu_memory_check --model resnet34 --image-size 224 --num-classes 1000 \\
        --stages 4 --micro-batch 8 --device cuda --out results/simulate/gpu_memory_check.md
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys
from pathlib import Path

import torch

from paper_repro import methods
from paper_repro.build import make_optimizer
from paper_repro.distributed.config import PipelineConfig
from paper_repro.distributed.inputs import build_learner, data_spec, synthetic_batches
from paper_repro.distributed.baselines import StageModule
from paper_repro.distributed.memory import SavedTensorMeter, saved_bytes_of
from paper_repro.simulate.memory import MetaNet, stage_memory
from paper_repro.simulate.schedules import torch_order

CHECKED = ("local", "gpipe", "1f1b", "1f1b-recompute", "gpipe-recompute")


def emulate_stage(cfg: PipelineConfig, schedule: str, stage: int, cut: list[list[int]]) -> dict:
    """Run ``stage`` of ``schedule`` for two steps on ``cfg.device``; measure the second."""
    if schedule not in CHECKED:
        raise ValueError(f"schedule {schedule!r} cannot be emulated here; valid: {', '.join(CHECKED)}")
    device = torch.device("cuda" if cfg.device == "cuda" else "cpu")
    gc.collect()            # an earlier stage's modules and tensors (reference cycles) must not count here
    if device.type == "cuda":
        torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    S, B, M = cfg.stages, cfg.micro_batch, cfg.micro_batches
    _, spec = data_spec(cfg)
    learner = build_learner(dataclasses.replace(cfg, method=f"chunked-{S}"), spec)
    net, blocks, last = learner.net, cut[stage], stage == S - 1
    with torch.no_grad():      # the input shape of this stage, from a forward of the blocks before it
        x0, y0 = next(synthetic_batches(cfg, spec, torch.Generator().manual_seed(cfg.seed)))
        h = x0
        for b in range(blocks[0]):
            h = net.blocks[b](h)
    local = schedule == "local"
    head = learner.heads[stage] if local else (net.head if last else None)
    module = StageModule([net.blocks[b] for b in blocks], head, recompute=schedule.endswith("-recompute")).to(device)
    params = list(module.parameters())
    opt = make_optimizer(cfg, params)
    order = [("F", i) for i in range(M)] if local else \
        [(a.kind, a.micro_batch) for a in torch_order(schedule, S, M).actions[stage]]

    def inputs(shape, make, whole_step: bool):
        # the first stage of pipelined backprop splits the step's batch into views (as torch's
        # schedules do), the last its labels; any other stage receives one micro-batch at a
        # time, into a buffer made when its forward starts
        if whole_step and not local:
            return make(M * B, *shape).split(B)
        return _Lazy(lambda: make(B, *shape))

    # on CUDA: the running peak is read and reset around every optimizer step, so the step's own
    # temporaries (above what was allocated when it began) are measured apart
    peak, step_temporaries = [0], [0]

    def optimizer_step():
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            at, peak[0] = torch.cuda.memory_allocated(device), max(peak[0], torch.cuda.max_memory_allocated(device))
            torch.cuda.reset_peak_memory_stats(device)
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            step_peak = torch.cuda.max_memory_allocated(device)
            peak[0], step_temporaries[0] = max(peak[0], step_peak), max(step_temporaries[0], step_peak - at)
            torch.cuda.reset_peak_memory_stats(device)
        opt.zero_grad(set_to_none=True)

    def step():
        if h.is_floating_point():
            xs = inputs(h.shape[1:], lambda *size: torch.randn(*size, device=device), stage == 0)
        else:
            xs = inputs(h.shape[1:], lambda *size: torch.randint(spec.num_classes, size, device=device), stage == 0)
        ys = inputs(y0.shape[1:], lambda *size: torch.randint(spec.num_classes, size, device=device), True)
        live = {}
        for kind, i in order:
            if kind == "F":
                # as the accounting counts it: a micro-batch in flight holds its receive buffer,
                # the stage's own input (saved for backward) and a buffer for its output's gradient
                buffer = xs[i]
                x = buffer if stage == 0 or not h.is_floating_point() else buffer.clone().requires_grad_(not local)
                out = module(x)
                grad = None if (last or local) else torch.randn_like(out)
                live[i] = (buffer, x, net.loss(out, ys[i]) if (last or local) else out, grad)
                if local:
                    kind = "B"
            if kind == "B":
                buffer, x, out, grad = live.pop(i)
                out.backward(grad)
                if local:
                    optimizer_step()
        if not local:
            optimizer_step()

    step()                                  # creates the optimizer state
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    peak[0] = step_temporaries[0] = 0
    meter = SavedTensorMeter(exclude=params)
    with meter:
        step()
    cuda_peak = step_extra = None
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        cuda_peak = max(peak[0], torch.cuda.max_memory_allocated(device)) - before
        step_extra = step_temporaries[0]
    extra = 0
    if module.recompute:    # checkpoint hides the recomputation from the meter: one micro-batch's bytes, as the runs add
        example = torch.zeros(B, *h.shape[1:], dtype=h.dtype, device=device)
        example.requires_grad_(stage > 0 and h.is_floating_point())
        extra = saved_bytes_of(StageModule(list(module.blocks), module.head), example, exclude=[*params, example])
    return {"saved_for_backward": meter.peak + extra, "cuda_max_memory_allocated": cuda_peak,
            "cuda_optimizer_temporaries": step_extra}


class _Lazy:
    """``lazy[i]``: a fresh tensor from ``make()`` each time (an input received at its forward)."""

    def __init__(self, make):
        self.make = make

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.make()


def check(cfg: PipelineConfig, schedules: list[str]) -> list[dict]:
    """One row per (schedule, stage): measured vs predicted bytes and their ratios."""
    meta = MetaNet(cfg)
    cut = methods.module_blocks(f"chunked-{cfg.stages}", meta.blocks)
    rows = []
    for schedule in schedules:
        predicted = stage_memory(meta, schedule, cfg.stages, cfg.micro_batch, cfg.micro_batches, cut,
                                 cfg.optimizer, first_step_inference=False)
        for s in range(cfg.stages):
            got = emulate_stage(cfg, schedule, s, cut)
            p = predicted[s]
            row = {"schedule": schedule, "stage": s, "saved_measured": got["saved_for_backward"],
                   "saved_predicted": p["saved_for_backward"],
                   "saved_ratio": p["saved_for_backward"] / max(got["saved_for_backward"], 1),
                   "cuda_measured": got["cuda_max_memory_allocated"], "peak_predicted": p["peak_bytes"],
                   "cuda_optimizer_temporaries": got["cuda_optimizer_temporaries"]}
            row["peak_ratio"] = (p["peak_bytes"] / row["cuda_measured"]) if row["cuda_measured"] else None
            rows.append(row)
    return rows


def markdown(rows: list[dict], cfg: PipelineConfig) -> str:
    where = torch.cuda.get_device_name() if cfg.device == "cuda" else "CPU (no allocator statistics: saved bytes only)"
    cols = list(rows[0])
    lines = [f"# Memory accounting vs {where}", "",
             f"{cfg.model} {cfg.model_kwargs} at {cfg.image_size} px, {cfg.stages} stages, micro-batch "
             f"{cfg.micro_batch}, {cfg.micro_batches} micro-batches per step, {cfg.optimizer}.", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join("-" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v)
                                       for v in r.values()) + " |")
    return "\n".join(lines + worst_stage_markdown(rows)) + "\n"


def worst_stage_markdown(rows: list[dict]) -> list[str]:
    """:func:`worst_stage` as markdown lines (none without CUDA measurements)."""
    worst = worst_stage(rows)
    if not worst:
        return []
    return ["", "The processor that needs the most, per schedule (MiB; ratio: accounted / measured):", "",
            "| schedule | measured (stage) | accounted (stage) | ratio |", "|---|---|---|---|",
            *(f"| {w['schedule']} | {w['measured'] / 2**20:.0f} ({w['measured_stage']}) | "
              f"{w['predicted'] / 2**20:.0f} ({w['predicted_stage']}) | {w['ratio']:.3f} |" for w in worst)]


def worst_stage(rows: list[dict]) -> list[dict]:
    """Per schedule, the largest measured CUDA peak over its stages against the largest accounted
    one (what the memory figure plots: the processor that needs the most); ``[]`` without CUDA."""
    out = []
    for schedule in dict.fromkeys(r["schedule"] for r in rows):
        mine = [r for r in rows if r["schedule"] == schedule]
        if any(r["cuda_measured"] is None for r in mine):
            return []
        measured = max(mine, key=lambda r: r["cuda_measured"])
        predicted = max(mine, key=lambda r: r["peak_predicted"])
        out.append({"schedule": schedule, "measured_stage": measured["stage"], "measured": measured["cuda_measured"],
                    "predicted_stage": predicted["stage"], "predicted": predicted["peak_predicted"],
                    "ratio": predicted["peak_predicted"] / measured["cuda_measured"]})
    return out


def read_table(path: str | Path) -> list[dict]:
    """The rows of a table :func:`markdown` wrote (``-``: not measured)."""
    lines = [line.strip() for line in Path(path).read_text().splitlines() if line.startswith("| ")]
    if not lines:
        raise ValueError(f"{str(path)!r} holds no table")
    cols = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != len(cols) or cells[0] == cols[0]:
            break           # the end of the first table
        rows.append({c: None if v == "-" else v if c == "schedule" else float(v) if "." in v else int(v)
                     for c, v in zip(cols, cells)})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    d = PipelineConfig()
    p.add_argument("--model", default="resnet18")
    p.add_argument("--model-kwargs", default="{}", help="JSON")
    p.add_argument("--image-size", type=int, default=d.image_size)
    p.add_argument("--num-classes", type=int, default=d.num_classes)
    p.add_argument("--seq-len", type=int, default=d.seq_len, help="transformer: tokens per sequence")
    p.add_argument("--stages", type=int, default=d.stages)
    p.add_argument("--micro-batch", type=int, default=d.micro_batch)
    p.add_argument("--micro-batches", type=int, default=d.micro_batches)
    p.add_argument("--optimizer", default=d.optimizer)
    p.add_argument("--schedule", default=",".join(CHECKED))
    p.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    p.add_argument("--out", default=None, help="write the table here (markdown)")
    args = p.parse_args(argv)
    try:
        cfg = PipelineConfig(model=args.model, model_kwargs=json.loads(args.model_kwargs), image_size=args.image_size,
                             num_classes=args.num_classes, seq_len=args.seq_len, stages=args.stages, micro_batch=args.micro_batch,
                             micro_batches=args.micro_batches, optimizer=args.optimizer, device=args.device).validate()
        if args.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("--device cuda but no CUDA device is available; use --device cpu")
        text = markdown(check(cfg, [s.strip() for s in args.schedule.split(",") if s.strip()]), cfg)
    except (ValueError, json.JSONDecodeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    return 0
