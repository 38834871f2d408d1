#!/usr/bin/env bash
# The stage processes' allocator, glibc's own behaviour against keeping freed memory (CPU_MALLOC_ENV in
# research/simulator_validation/replay.py, set in the environment of the runs): ResNet-18 width
# 16, 2 CPU processes, micro-batch 8 x 16 (MB=32: 32 x 16), local / GPipe / 1F1B, the two settings
# alternated ROUNDS times. MODEL=mlp: the MLP 8x1024 instead. The stage processes' minor page
# faults per timed step go into the summary too (memory the allocator gave back and took again).
# Run it on an otherwise idle machine.
#
#   research/simulator_validation/bench_malloc.sh [ROUNDS] -> results/pipeline/malloc/{system,keep-freed}_r<k>.json + summary.md
#   FIRST=4 research/simulator_validation/bench_malloc.sh 9    # add rounds 4..9 to existing ones; SUMMARY_ONLY=1: no runs
#   MB=32 research/simulator_validation/bench_malloc.sh 5      # micro-batch 32 -> results/pipeline/malloc_mb32/
#   MODEL=mlp MB=256 research/simulator_validation/bench_malloc.sh 3   # -> results/pipeline/malloc_mlp_mb256/
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
ROUNDS=${1:-3}
MB=${MB:-8}
MODEL=${MODEL:-resnet}
KEEP_FREED=(MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=17179869184 MALLOC_TOP_PAD_=536870912)
case $MODEL in
    resnet) NET=(--model resnet18 --model-kwargs '{"width": 16}' --image-size 32); NAME="ResNet-18 width 16"; TAG= ;;
    mlp) NET=(--model mlp --model-kwargs '{"depth": 8, "width": 1024}'); NAME="MLP 8x1024"; TAG=_mlp ;;
    *) echo "error: MODEL must be resnet or mlp, got '$MODEL'" >&2; exit 2 ;;
esac
OUT=results/pipeline/malloc$TAG$([[ "$MB" == 8 && -z "$TAG" ]] || echo "_mb$MB")
mkdir -p "$OUT"
[[ -n "${SUMMARY_ONLY:-}" ]] && FIRST=$((ROUNDS + 1))
for k in $(seq "${FIRST:-1}" "$ROUNDS"); do
    for setting in system keep-freed; do
        echo "== round $k: $setting =="
        if [[ "$setting" == keep-freed ]]; then set_env=("${KEEP_FREED[@]}"); else set_env=(); fi
        env "${set_env[@]}" "$PY" -m paper_repro.cli bench pipeline "${NET[@]}" \
            --micro-batch "$MB" --stages 2 --micro-batches 16 --steps 3 \
            --warmup-steps 1 --optimizer adam --schedule local,gpipe,1f1b --no-progress \
            --json "$OUT/${setting}_r$k.json" > /dev/null
    done
done
"$PY" - "$OUT" "$ROUNDS" "$MB" "$NAME" <<'PYEOF'
import json, statistics, sys
from pathlib import Path
out, rounds, mb, name = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
runs = {s: [json.loads((out / f"{s}_r{k}.json").read_text()) for k in range(1, rounds + 1)]
        for s in ("system", "keep-freed")}
lines = ["# Stage-process allocator: glibc's own behaviour vs keeping freed memory", "",
         f"{name}, 2 CPU processes, micro-batch {mb} x 16, Adam; {rounds} alternated rounds, "
         "samples/s median [min-max].", "",
         "| schedule | glibc (system) | keeping freed memory | ratio of medians |", "|---|---|---|---|"]
for i, rec in enumerate(runs["system"][0]):
    vals = {s: [rs[i]["samples_per_s"] for rs in runs[s]] for s in runs}
    fmt = lambda v: f"{statistics.median(v):.0f} [{min(v):.0f}-{max(v):.0f}]"
    lines.append(f"| {rec['schedule']} | {fmt(vals['system'])} | {fmt(vals['keep-freed'])} | "
                 f"{statistics.median(vals['keep-freed']) / statistics.median(vals['system']):.2f} |")
lines += ["", "Ratios within each launch (its schedules run back to back), median [min-max] over rounds:", "",
          "| ratio | glibc (system) | keeping freed memory |", "|---|---|---|"]
for name in ("local", "gpipe"):
    cells = []
    for s in ("system", "keep-freed"):
        v = [next(r["samples_per_s"] for r in rs if r["schedule"] == name)
             / next(r["samples_per_s"] for r in rs if r["schedule"] == "1f1b") for rs in runs[s]]
        cells.append(f"{statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]")
    lines.append(f"| {name} / 1f1b | {cells[0]} | {cells[1]} |")
if all(rec.get("minor_page_faults_per_stage") for rs in runs.values() for r in rs for rec in r):
    lines += ["", "Minor page faults per timed step, stage 0 / stage 1, median over rounds (pages of 4 KiB the "
              "kernel mapped in again):", "", "| schedule | glibc (system) | keeping freed memory |", "|---|---|---|"]
    for i, rec in enumerate(runs["system"][0]):
        cells = []
        for s in ("system", "keep-freed"):
            per = [[f / r[i]["steps"] for f in r[i]["minor_page_faults_per_stage"]] for r in runs[s]]
            cells.append(" / ".join(f"{statistics.median(p[j] for p in per):.0f}" for j in range(len(per[0]))))
        lines.append(f"| {rec['schedule']} | {cells[0]} | {cells[1]} |")
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PYEOF
