#!/usr/bin/env bash
# Independent re-measurements of the simulator's validation runs: the four tables of
# docs/simulate.md (ResNet-18 width 16 and MLP 8x1024, glibc's default allocator and keep-freed),
# each measured again from scratch (fresh processes, 5 interleaved repeats, same-session
# calibration and link) as results/simulate/validation_<model>_cpu2_busylink_<allocator>_set<K>.
# Comparing the sets says how well the measured ratios to 1F1B reproduce from one measurement
# to the next (research/simulator_validation/validation_repro.py). Run it on an otherwise idle machine.
#
#   research/simulator_validation/validation_sets.sh 2 3     # sets 2 and 3; a table whose .runs.json exists is skipped,
#                                    # so an interrupted call resumes where it stopped
#
# Set 1 is the table itself (no suffix). TABLES picks the tables (default "resnet mlp"; also
# "mlp-large": the MLP at micro-batch 128 and 256, where its stages are compute-bound), ALLOCATORS
# the allocators (default "glibc keep-freed"):
#
#   TABLES=mlp-large ALLOCATORS=glibc research/simulator_validation/validation_sets.sh 1 2 3
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
export OMP_NUM_THREADS=1
OUT=results/simulate
COMMON=(--stages 2 --micro-batches 16 --steps 3 --warmup-steps 1 --optimizer adam --repeats 5
        --link auto --schedule local,local-per-step,gpipe,1f1b,1f1b-recompute)
RESNET=(--model resnet18 --model-kwargs '{"width": 16}' --micro-batch 8,16,32)
MLP=(--model mlp --model-kwargs '{"depth": 8, "width": 1024}' --micro-batch 16,32,64)
MLP_LARGE=(--model mlp --model-kwargs '{"depth": 8, "width": 1024}' --micro-batch 128,256)
TABLES=${TABLES:-resnet mlp}
ALLOCATORS=${ALLOCATORS:-glibc keep-freed}
# keep-freed: glibc keeps freed memory in the process (CPU_MALLOC_ENV in replay.py)
KEEP_FREED=(MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=17179869184 MALLOC_TOP_PAD_=536870912)

table() {  # table NAME ALLOCATOR ARGS...
    local name=$1 alloc=$2; shift 2
    if [[ -e "$OUT/$name.runs.json" ]]; then echo "skip $name (done)"; return; fi
    echo "== $name ($(date -u +%H:%M:%S)) =="
    if [[ "$alloc" == keep-freed ]]; then
        env "${KEEP_FREED[@]}" "$PY" -m research.simulator_validation.validate "$@" "${COMMON[@]}" --validate "$OUT/$name"
    else
        "$PY" -m research.simulator_validation.validate "$@" "${COMMON[@]}" --validate "$OUT/$name"
    fi
}

for k in "$@"; do
    suffix=_set$k; [[ "$k" == 1 ]] && suffix=
    for alloc in $ALLOCATORS; do
        tag=${alloc//-/}
        for t in $TABLES; do
            case $t in
                resnet) table "validation_resnet18w16_cpu2_busylink_$tag$suffix" "$alloc" "${RESNET[@]}" ;;
                mlp) table "validation_mlp8x1024_cpu2_busylink_$tag$suffix" "$alloc" "${MLP[@]}" ;;
                mlp-large) table "validation_mlp8x1024_mb128_cpu2_busylink_$tag$suffix" "$alloc" "${MLP_LARGE[@]}" ;;
                *) echo "error: unknown table '$t' in TABLES (resnet, mlp, mlp-large)" >&2; exit 2 ;;
            esac
        done
    done
done
echo "== done ($(date -u +%H:%M:%S)) =="
