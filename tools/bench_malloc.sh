#!/usr/bin/env bash
# The stage processes' allocator, glibc's own behaviour against keeping freed memory (the
# launcher's default, see CPU_MALLOC_ENV in paper_repro/distributed/config.py): ResNet-18 width
# 16, 2 CPU processes, micro-batch 8 x 16 (MB=32: 32 x 16), local / GPipe / 1F1B, the two settings
# alternated ROUNDS times. Run it on an otherwise idle machine.
#
#   tools/bench_malloc.sh [ROUNDS] -> results/pipeline/malloc/{system,keep-freed}_r<k>.json + summary.md
#   FIRST=4 tools/bench_malloc.sh 9    # add rounds 4..9 to existing ones; SUMMARY_ONLY=1: no runs
#   MB=32 tools/bench_malloc.sh 5      # micro-batch 32 -> results/pipeline/malloc_mb32/
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
ROUNDS=${1:-3}
MB=${MB:-8}
OUT=results/pipeline/malloc$([[ "$MB" == 8 ]] || echo "_mb$MB")
mkdir -p "$OUT"
[[ -n "${SUMMARY_ONLY:-}" ]] && FIRST=$((ROUNDS + 1))
for k in $(seq "${FIRST:-1}" "$ROUNDS"); do
    for setting in system keep-freed; do
        echo "== round $k: $setting =="
        PAPER_REPRO_MALLOC=$setting "$PY" -m paper_repro.cli bench pipeline --model resnet18 \
            --model-kwargs '{"width": 16}' --micro-batch "$MB" --stages 2 --micro-batches 16 --steps 3 \
            --warmup-steps 1 --optimizer adam --schedule local,gpipe,1f1b --image-size 32 --no-progress \
            --json "$OUT/${setting}_r$k.json" > /dev/null
    done
done
"$PY" - "$OUT" "$ROUNDS" "$MB" <<'PYEOF'
import json, statistics, sys
from pathlib import Path
out, rounds, mb = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
runs = {s: [json.loads((out / f"{s}_r{k}.json").read_text()) for k in range(1, rounds + 1)]
        for s in ("system", "keep-freed")}
lines = ["# Stage-process allocator: glibc's own behaviour vs keeping freed memory", "",
         f"ResNet-18 width 16, 2 CPU processes, micro-batch {mb} x 16, Adam; {rounds} alternated rounds, "
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
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PYEOF
