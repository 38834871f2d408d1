"""The paper's setting simulated with per-block costs measured on a GPU (tools/gpu_calibrate.py).

Reads the stored calibrations ``calibration_resnet34_224_<gpu>_mb<B>[_run<k>].json`` and writes a
table of local's simulated samples/s over each pipelined-backprop baseline: ResNet-34 at 224x224,
1000 classes, 4 processors, 16 micro-batches per step, communication free (as notebook 08),

* at the paper's micro-batch (8), once per calibration (median [min-max]), with ``bench
  pipeline``'s cut (``blocks``) and the cut balancing measured time (``time``);
* with the input as measured (the first processor draws synthetic batches on the host and copies
  them, ``BlockCosts.data``/``concat``) and with the input free (prefetched, as a data loader with
  workers supplies it), since on a GPU the host-side draw is as long as a stage's compute;
* at every micro-batch size calibrated (one calibration each; the first run at the paper's size);
* against the number of processors, ResNet-34 and the Transformer, as notebook 08's figure.

Needs no GPU: ``python tools/gpu_paper_setting.py --gpu h200 --out results/simulate/paper_setting_h200``
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

from paper_repro import settings
from paper_repro.simulate.calibrate import BlockCosts
from paper_repro.simulate.scaling import paper_setting, ratio_table

STORE = Path(__file__).resolve().parents[1] / "results/simulate"


def stored(gpu: str, folder: Path = STORE) -> dict[int, list[Path]]:
    """micro-batch size -> its calibration files for ``gpu``, runs in order."""
    found: dict[int, list[Path]] = {}
    for path in sorted(folder.glob(f"calibration_resnet34_224_{gpu}_mb*.json")):
        m = re.fullmatch(rf"calibration_resnet34_224_{gpu}_mb(\d+)(?:_run(\d+))?", path.stem)
        if m:
            found.setdefault(int(m.group(1)), []).append((int(m.group(2) or 0), path))
    return {B: [p for _, p in sorted(runs)] for B, runs in sorted(found.items())}


def table(files: dict[int, list[Path]]) -> pd.DataFrame:
    s = settings.scaling_settings("quick")
    rows = []
    for B, paths in files.items():
        for k, path in enumerate(paths if B == s.paper_micro_batch else paths[:1]):
            bc = BlockCosts.load(path)
            for inp, costs in (("as measured", bc), ("free", bc.without_input())):
                for cut in ("blocks", "time"):
                    t = paper_setting([costs], s.paper_stages, s.paper_micro_batches, s.baselines, B,
                                      cut=cut)
                    rows += [{"micro_batch": B, "calibration": path.name, "input": inp, "cut": cut,
                              "baseline": r.baseline, "ratio": r.ratio} for r in t.itertuples()]
    return pd.DataFrame(rows)


def by_stages(folder: Path, gpu: str) -> list[str]:
    """Markdown lines: local / each baseline vs the number of processors, as notebook 08's figure
    (micro-batch 8, ``stage_sweep_micro_batches`` per step, time-balanced cut), input free, once per
    calibration of each model at the paper's micro-batch: median [min-max]."""
    s = settings.scaling_settings("quick")
    B = s.paper_micro_batch
    lines = []
    for key, stem in (("resnet", "calibration_resnet34_224"), ("transformer", "calibration_transformer64x256")):
        paths = sorted(folder.glob(f"{stem}_{gpu}_mb{B}_run*.json"))
        if not paths:
            continue
        t = pd.concat([ratio_table(BlockCosts.load(path).without_input(), s.ratio_stages[key],
                                   [s.stage_sweep_micro_batches], s.baselines, B) for path in paths])
        lines += ["", f"## {key}: by number of processors ({len(paths)} calibrations: median [min-max]; input "
                      f"free, {s.stage_sweep_micro_batches} micro-batches of {B} per step, time-balanced cut)", "",
                  "| processors | " + " | ".join(f"local/{b}" for b in s.baselines) + " |",
                  "|---|" + "---|" * len(s.baselines)]
        for S, part in t.groupby("stages"):
            g = part.groupby("baseline").ratio
            cells = [f"{g.median()[b]:.2f} [{g.min()[b]:.2f}-{g.max()[b]:.2f}]" if b in g.groups else "-"
                     for b in s.baselines]
            lines.append(f"| {S} | " + " | ".join(cells) + " |")
    return lines


def markdown(df: pd.DataFrame, files: dict[int, list[Path]], command: str) -> str:
    s = settings.scaling_settings("quick")
    first = BlockCosts.load(next(iter(files.values()))[0])
    paper_mb = s.paper_micro_batch
    lines = [f"# The paper's setting, simulated with per-block costs measured on {first.hardware}", "",
             f"ResNet-34 at 224x224, 1000 classes, {s.paper_stages} processors, {s.paper_micro_batches} "
             f"micro-batches per step, communication free. Each number: local's simulated samples/s over the "
             f"baseline's. Calibrations: {first.note}. Made with `{command}`.", "",
             f"## Micro-batch {paper_mb}, {len(files.get(paper_mb, []))} calibrations: median [min-max]", "",
             "| input | cut | " + " | ".join(f"local/{b}" for b in s.baselines) + " |",
             "|---|---|" + "---|" * len(s.baselines)]
    at = df[df.micro_batch == paper_mb]
    for (inp, cut), part in at.groupby(["input", "cut"], sort=False):
        g = part.groupby("baseline").ratio
        lines.append(f"| {inp} | {cut} | " + " | ".join(
            f"{g.median()[b]:.2f} [{g.min()[b]:.2f}-{g.max()[b]:.2f}]" for b in s.baselines) + " |")
    lines += ["", "## By micro-batch size (one calibration each, input free, cut `blocks`)", "",
              "| micro-batch | net forward ms | net backward ms | input ms | "
              + " | ".join(f"local/{b}" for b in s.baselines) + " |",
              "|---|---|---|---|" + "---|" * len(s.baselines)]
    for B, paths in files.items():
        bc = BlockCosts.load(paths[0])
        part = df[(df.calibration == paths[0].name) & (df.input == "free") & (df.cut == "blocks")]
        r = dict(zip(part.baseline, part.ratio))
        lines.append(f"| {B} | {sum(bc.forward) * 1e3:.2f} | {sum(bc.backward) * 1e3:.2f} | {bc.data * 1e3:.2f} | "
                     + " | ".join(f"{r[b]:.2f}" if b in r else "-" for b in s.baselines) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", default="h200", help="the tag in the calibration files' names")
    ap.add_argument("--folder", default=str(STORE), help="where the calibrations are")
    ap.add_argument("--out", required=True, help="output path without suffix (.md and .csv)")
    args = ap.parse_args(argv)
    files = stored(args.gpu, Path(args.folder))
    if not files:
        print(f"error: no calibration_resnet34_224_{args.gpu}_mb*.json in {args.folder}", file=sys.stderr)
        return 2
    df = table(files)
    df.to_csv(f"{args.out}.csv", index=False)
    text = markdown(df, files, " ".join(["python", "tools/gpu_paper_setting.py", *(argv or sys.argv[1:])]))
    text += "\n".join(by_stages(Path(args.folder), args.gpu)) + "\n"
    Path(f"{args.out}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
