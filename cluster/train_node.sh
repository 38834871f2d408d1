#!/usr/bin/env bash
# One node's part of a training run on several nodes: one torchrun per node, one stage process per
# GPU of the node, every node meeting at the rendezvous on HEAD:PORT (c10d). cluster/train.sbatch
# starts it on every node with srun; anywhere else, run it on each node with NODE_RANK set.
#
#   NNODES=2 NODE_RANK=0 HEAD=node-a TRAINING=training.json OUT=result.json \
#       bash cluster/train_node.sh --model mlp --dataset cifar10 --data-dir /data/cifar10 \
#       --stages 2 --schedule local --method greedy --micro-batch 64 --micro-batches 16 --steps 500
#
# The arguments are the worker's (python -m paper_repro.distributed.run --help): model, data, stages,
# schedule, micro-batches, steps, optimizer. TRAINING is a JSON file of the training options
# (paper_repro.distributed.fields.TrainingFields: eval_every, eval_every_examples, stop_loss,
# checkpoint, checkpoint_every, resume, save), e.g.
#   {"eval_every_examples": 65536, "stop_loss": 1.3, "checkpoint": "/shared/ckpt", "checkpoint_every": 200}
# Rank 0 writes the records and the summary to OUT (a JSON list of one result); checkpoints and the
# saved model go where every node can write (shared storage). SIGTERM (a time limit, preemption)
# stops every stage after a common step, writing a checkpoint; resubmit with "resume": true.
# Settings (environment variables):
#   NNODES, NODE_RANK   nodes, and this node's rank (default: Slurm's SLURM_NNODES, SLURM_NODEID)
#   HEAD, PORT          the rendezvous host (node 0) and port (default: the job's first node, 29500)
#   NPROC_PER_NODE      stage processes on this node (default 1; one per GPU)
#   DEVICE              cuda (default) or cpu;  THREADS: torch threads per process
#   RUN_ID              the rendezvous id (default: SLURM_JOB_ID, else paper-repro-train)
#   JOIN_TIMEOUT        seconds a node waits for the others at the rendezvous (default 600)
#   PYTHON              the interpreter that has paper_repro installed (default: python)
set -euo pipefail
NNODES=${NNODES:-${SLURM_NNODES:?set NNODES}}
NODE_RANK=${NODE_RANK:-${SLURM_NODEID:?set NODE_RANK}}
HEAD=${HEAD:-$(scontrol show hostnames "${SLURM_JOB_NODELIST:?set HEAD}" | head -n 1)}
PORT=${PORT:-29500}
NPROC_PER_NODE=${NPROC_PER_NODE:-1}
DEVICE=${DEVICE:-cuda}
THREADS=${THREADS:-}
RUN_ID=${RUN_ID:-${SLURM_JOB_ID:-paper-repro-train}}
JOIN_TIMEOUT=${JOIN_TIMEOUT:-600}
TRAINING=${TRAINING:?set TRAINING: a JSON file of the training options}
OUT=${OUT:-result.json}
PYTHON=${PYTHON:-python}

args=(--device "$DEVICE" --training "$TRAINING" --json "$OUT" --quiet)
if [[ -n $THREADS ]]; then args+=(--threads "$THREADS"); fi
echo "node $NODE_RANK of $NNODES on $(hostname), rendezvous $HEAD:$PORT" >&2
# exec: the scheduler's SIGTERM reaches torchrun, which passes it to the stage processes
exec "$PYTHON" -m paper_repro.distributed.torchrun --nnodes "$NNODES" --nproc-per-node "$NPROC_PER_NODE" \
    --node-rank "$NODE_RANK" --rdzv-backend c10d --rdzv-endpoint "$HEAD:$PORT" --rdzv-id "$RUN_ID" \
    --rdzv-conf "join_timeout=$JOIN_TIMEOUT" -m paper_repro.distributed.run "${args[@]}" "$@"
