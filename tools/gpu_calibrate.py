"""Per-block costs of the scaling notebook's models measured on a GPU, for the simulator.

On a GPU time is not proportional to the micro-batch size (small batches leave the device
idle and pay kernel launches), so :meth:`BlockCosts.scaled` is no model there: this measures
ResNet-34 at 224x224 (1000 classes) at every micro-batch size of ``--micro-batches``, the
paper's micro-batch ``--repeats`` times (how far measuring again moves the answer), and the
scaling notebook's Transformer at the paper's micro-batch. Each calibration is the best of
``--reps`` rounds per block after a warm-up round, every timing synchronized with the device.

    python tools/gpu_calibrate.py --out results/simulate/gpu --micro-batches 1,2,4,8,16,32,64

writes ``calibration_resnet34_224_<gpu>_mb<B>[_run<k>].json`` and
``calibration_transformer64x256_<gpu>_mb<B>[_run<k>].json`` into ``--out`` (``<gpu>``: the device's
name, lower case, letters and digits), each noting the torch version and the math settings.
The simulation itself needs no GPU: ``tools/gpu_paper_setting.py`` reads these files.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import torch

from paper_repro import settings
from paper_repro.distributed import PipelineConfig
from paper_repro.simulate.calibrate import measure


def gpu_tag(device: str) -> str:
    if device == "cpu":
        return "cpu"
    name = torch.cuda.get_device_name().lower().replace("nvidia", "")
    return re.sub(r"[^a-z0-9]+", "", name) or "gpu"


def math_note() -> str:
    return (f"torch {torch.__version__}, CUDA {torch.version.cuda}, cudnn {torch.backends.cudnn.version()}, "
            f"float32 with matmul TF32 {torch.backends.cuda.matmul.allow_tf32}, cudnn TF32 "
            f"{torch.backends.cudnn.allow_tf32}, cudnn.benchmark {torch.backends.cudnn.benchmark}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for the calibration files")
    ap.add_argument("--micro-batches", default="1,2,4,8,16,32,64", help="ResNet-34 micro-batch sizes")
    ap.add_argument("--repeats", type=int, default=3, help="calibrations at the paper's micro-batch")
    ap.add_argument("--reps", type=int, default=10, help="each calibration: best of this many rounds per block")
    ap.add_argument("--models", default="resnet,transformer", help="which of resnet, transformer")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: try the tool without a GPU")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device is visible; this tool measures a GPU", file=sys.stderr)
        return 2
    try:
        sizes = [int(v) for v in args.micro_batches.split(",") if v.strip()]
    except ValueError:
        print(f"error: --micro-batches must be comma-separated integers, got {args.micro_batches!r}", file=sys.stderr)
        return 2
    if not sizes or min(sizes) < 1 or args.repeats < 1 or args.reps < 1:
        print("error: micro-batch sizes, --repeats and --reps must be positive", file=sys.stderr)
        return 2
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not models or set(models) - {"resnet", "transformer"}:
        print(f"error: --models must name resnet and/or transformer, got {args.models!r}", file=sys.stderr)
        return 2
    s = settings.scaling_settings("full")
    out, tag, t0 = Path(args.out), gpu_tag(args.device), time.time()
    paper_mb = s.paper_micro_batch
    jobs = []          # (model key, file stem, micro-batch, run number or None)
    for B in sizes if "resnet" in models else []:
        runs = range(1, args.repeats + 1) if B == paper_mb else [None]
        jobs += [("resnet", "calibration_resnet34_224", B, k) for k in runs]
    if "transformer" in models:
        jobs += [("transformer", "calibration_transformer64x256", paper_mb, k) for k in range(1, min(2, args.repeats) + 1)]
    for i, (key, stem, B, k) in enumerate(jobs, 1):
        cfg = PipelineConfig(**s.models[key].config_fields(), stages=s.paper_stages, micro_batch=B,
                             micro_batches=s.paper_micro_batches, device=args.device).validate()
        bc = measure(cfg, reps=args.reps)
        bc.note = f"measured by tools/gpu_calibrate.py, best of {args.reps} rounds; {math_note()}"
        name = f"{stem}_{tag}_mb{B}" + (f"_run{k}" if k else "") + ".json"
        bc.save(out / name)
        print(f"[{i}/{len(jobs)}] {name}: forward {sum(bc.forward) * 1e3:.2f} ms, backward "
              f"{sum(bc.backward) * 1e3:.2f} ms per micro-batch ({time.time() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
