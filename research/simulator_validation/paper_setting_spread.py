"""How much does the simulated paper-setting ratio move with the calibration?

The paper's setting (ResNet-34 at 224x224, 1000 classes, 4 processors, micro-batch 8, 16 per
step) is simulated from per-block costs measured once (notebook 08's cached
``calibration_resnet34_224_cpu1.json``). This measures the costs ``--calibrations`` more times,
one after the other, with one thread per processor as the cached file, and simulates the setting
with each, and with every calibration stored by earlier calls: local's samples/s over every
pipelined-backprop baseline, with ``bench pipeline``'s cut and with the cut balancing measured time
(what notebook 08 shows).

    .venv/bin/python -m research.simulator_validation.paper_setting_spread --calibrations 3 --out results/simulate/paper_setting_spread

writes ``OUT.md`` (the table), ``OUT.csv`` and every new calibration beside the cached one, as
``calibration_resnet34_224_cpu1_runK.json`` numbered after the stored ones, with the CPU model in
its note (notebook 08 shows the setting with those its settings list). Run it on an idle machine.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import pandas as pd

from paper_repro import settings
from paper_repro.distributed.config import PipelineConfig
from paper_repro.hardware import cpu_model
from paper_repro.simulate.calibrate import BlockCosts, measure
from paper_repro.simulate.scaling import ratio_table
from .validate import machine_note

CACHED = Path(__file__).resolve().parents[2] / "results/simulate/calibration_resnet34_224_cpu1.json"


def run_number(path: Path) -> int:
    return int(path.stem.rsplit("_run", 1)[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibrations", type=int, default=3, help="new calibrations to measure")
    ap.add_argument("--reps", type=int, default=3, help="each calibration: best of this many rounds per block")
    ap.add_argument("--out", required=True, help="output path without suffix")
    args = ap.parse_args(argv)
    s = settings.scaling_settings("quick")
    cfg = PipelineConfig(**s.models["resnet"].config_fields(), stages=s.paper_stages, micro_batch=s.paper_micro_batch,
                         micro_batches=s.paper_micro_batches, threads=1).validate()
    before, t0 = machine_note(), time.time()
    calibrations = {"cached (notebook 08)": BlockCosts.load(CACHED)}
    stored = sorted(CACHED.parent.glob(f"{CACHED.stem}_run*.json"), key=run_number)
    for path in stored:
        calibrations[f"run {run_number(path)} (stored)"] = BlockCosts.load(path)
    first = max((run_number(p) for p in stored), default=0) + 1
    for k in range(first, first + args.calibrations):
        bc = measure(cfg, reps=args.reps, threads=1)
        bc.note = (f"one thread per processor; measured by research/simulator_validation/paper_setting_spread.py on {before}; "
                   f"CPU model {cpu_model()}")
        bc.save(CACHED.with_name(f"{CACHED.stem}_run{k}.json"))
        calibrations[f"run {k} (new)"] = bc
        print(f"calibration {k - first + 1}/{args.calibrations} done ({time.time() - t0:.0f} s)", flush=True)
    rows = []
    for name, bc in calibrations.items():
        model = re.search(r"CPU model (.+)$", bc.note or "")
        for cut in ("blocks", "time"):
            table = ratio_table(bc, [s.paper_stages], [s.paper_micro_batches], s.baselines,
                                s.paper_micro_batch, cut=cut)
            rows.append({"calibration": name, "cpu_model": model.group(1) if model else "not recorded",
                         "cut": cut, "net_forward_s": sum(bc.forward),
                         "net_backward_s": sum(bc.backward),
                         **{f"local/{b}": r for b, r in zip(table.baseline, table.ratio)}})
    df = pd.DataFrame(rows)
    df.to_csv(f"{args.out}.csv", index=False)
    ratio_cols = [c for c in df.columns if c.startswith("local/")]
    lines = ["# The paper's setting, simulated with several calibrations", "",
             f"ResNet-34 at 224x224, 1000 classes, {s.paper_stages} processors, micro-batch "
             f"{s.paper_micro_batch}, {s.paper_micro_batches} per step, communication free (as notebook 08). "
             f"Each row: local's simulated samples/s over a baseline's. `blocks`: as many blocks per stage as "
             f"chunked-S (`--cut blocks`); `time`: the "
             f"cut balancing the calibration's measured time. New calibrations: best of {args.reps} rounds per "
             f"block, one thread, one after the other on {before} ({time.time() - t0:.0f} s in all); stored ones: "
             f"the same, by earlier calls. Made with "
             f"`{' '.join(['.venv/bin/python', '-m', 'research.simulator_validation.paper_setting_spread', *sys.argv[1:]])}`.", "",
             "| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row) + " |")
    lines += ["", "Over all calibrations (median [min-max]):", ""]
    for cut in ("blocks", "time"):
        part = df[df.cut == cut]
        lines.append(f"* cut `{cut}`: " + "; ".join(
            f"{c} {part[c].median():.2f} [{part[c].min():.2f}-{part[c].max():.2f}]" for c in ratio_cols))
    lines += ["", "By the CPU model the calibration was measured on (median [min-max]):", ""]
    for (model, cut), part in df.groupby(["cpu_model", "cut"], sort=False):
        lines.append(f"* {model}, cut `{cut}` ({len(part)}): " + "; ".join(
            f"{c} {part[c].median():.2f} [{part[c].min():.2f}-{part[c].max():.2f}]" for c in ratio_cols))
    Path(f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[4:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
