#!/usr/bin/env bash
# The pipeline benchmark behind the README's throughput table: 2 CPU processes, Adam, every
# update rule and schedule (local, local/M, GPipe, 1F1B, Interleaved 1F1B, interleaved zero
# bubble, ZBV, DualPipeV, each with and without recomputation, DDP), 3 interleaved repeats,
# medians. Run it on an otherwise idle machine: other load changes the timings.
#
#   tools/bench_pipeline_targets.sh            # the README's sizes -> results/pipeline/*_targets_cpu2.json
#   tools/bench_pipeline_targets.sh --tiny     # a small run to check that everything works -> $TMPDIR
#   SUFFIX=_rerun tools/bench_pipeline_targets.sh   # -> *_targets_cpu2_rerun.json; existing files are
#                                                    # never overwritten (remove them first to redo)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
export OMP_NUM_THREADS=1

if [[ "${1:-}" == "--tiny" ]]; then
    OUT=${TMPDIR:-/tmp}/bench_pipeline_tiny
    MLP='{"depth": 8, "width": 64}';  MLP_MB=8;  RESNET='{"width": 4}'; RESNET_MB=4; IMG=16
    MBS=8; STEPS=1; REPEATS=1
else
    OUT=results/pipeline
    MLP='{"depth": 8, "width": 1024}'; MLP_MB=64; RESNET='{"width": 16}'; RESNET_MB=16; IMG=32
    MBS=16; STEPS=3; REPEATS=3
fi
mkdir -p "$OUT"
MLP_JSON="$OUT/mlp8x1024_targets_cpu2${SUFFIX:-}.json"; RESNET_JSON="$OUT/resnet18w16_targets_cpu2${SUFFIX:-}.json"
for f in "$MLP_JSON" "$RESNET_JSON"; do
    if [[ -e "$f" && "${1:-}" != "--tiny" ]]; then
        echo "error: $f exists; set SUFFIX (e.g. SUFFIX=_rerun) or remove it" >&2
        exit 2
    fi
done
COMMON=(--stages 2 --micro-batches "$MBS" --steps "$STEPS" --warmup-steps 1 --repeats "$REPEATS"
        --optimizer adam --schedule all --image-size "$IMG" --no-progress)

echo "== MLP 8 blocks, micro-batch $MLP_MB x $MBS =="
"$PY" -m paper_repro.cli bench pipeline --model mlp --model-kwargs "$MLP" --micro-batch "$MLP_MB" \
    "${COMMON[@]}" --json "$MLP_JSON"
echo "== ResNet-18, micro-batch $RESNET_MB x $MBS =="
"$PY" -m paper_repro.cli bench pipeline --model resnet18 --model-kwargs "$RESNET" --micro-batch "$RESNET_MB" \
    "${COMMON[@]}" --json "$RESNET_JSON"
