#!/bin/bash
# Submit a sweep as a Slurm array (one shard per task) and its notebook as a job that starts once every
# shard has succeeded:   STUDY=mlp PROFILE=full RESULTS=/shared/results cluster/submit.sh 8
# The settings are the environment variables of cluster/sweep.sbatch and cluster/notebook.sbatch.
set -euo pipefail
SHARDS=${1:-${SHARDS:-8}}
# notebook.sbatch refuses the quick profile (its notebooks read no store): refuse it before the sweep runs
if [[ ${PROFILE:-full} == quick ]]; then
    echo "error: PROFILE=quick: the notebook step reads a sweep's store at PROFILE=cpu or full only; a quick" \
         "sweep needs no cluster: paper-repro notebooks run --profile quick" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
array=$(sbatch --parsable --array="0-$((SHARDS - 1))" "$here/sweep.sbatch")
array=${array%%;*}  # --parsable prints "id" or "id;cluster"
notebook=$(sbatch --parsable --dependency="afterok:$array" "$here/notebook.sbatch")
echo "sweep: array job $array ($SHARDS shards); notebook: job ${notebook%%;*} after it succeeds"
