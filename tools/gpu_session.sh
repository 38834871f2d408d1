#!/usr/bin/env bash
# Everything this project checks on a GPU, in one run of a few minutes (for a lent GPU machine
# whose python3 already has torch; the repository is the working directory):
#
#     bash tools/gpu_session.sh OUTDIR
#
# 1. the environment (nvidia-smi, torch, CUDA), then the tests that need a GPU (pytest -m cuda:
#    training on cuda, a one-GPU pipeline stage, the CUDA-event stopwatch, memory);
# 2. the memory accounting against torch.cuda.max_memory_allocated, stage by stage, ResNet-34 at
#    224 px (research/simulator_validation/gpu_memory_check.py): 4 stages at micro-batch 8 (later 8 stages at 8 and 4 at 32);
# 3. per-block costs of ResNet-34 and the Transformer on this GPU (tools/gpu_calibrate.py);
# 4. the self-check on cuda (python -m paper_repro.selfcheck; its notebook piece needs papermill
#    and ipykernel: wheels in .whl/ are installed to /tmp/site first if there);
# 5. with two GPUs or more, the simulator against real CUDA pipelines (2 stages, ResNet-34), calibrated
#    and with the runs' own durations;
# 6. notebook 08 in its full profile (measures its own costs on cuda).
# The most wanted come first, so a run cut short loses the least.
#
# Each step has its own time limit, so one that hangs costs only its share; after each step
# OUTDIR/gpu_session.tar.gz is rewritten with everything so far (the logs included), so a run
# stopped early still returns what it did. Exit status: the number of failed steps.
set -u
OUT=${1:?usage: bash tools/gpu_session.sh OUTDIR}
W=$(mktemp -d "${TMPDIR:-/tmp}/gpu_session.XXXX")
mkdir -p "$OUT" "$W/figures"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
failed=0
pack() { tar -czf "$OUT/gpu_session.tar.gz.tmp" -C "$W" . && mv "$OUT/gpu_session.tar.gz.tmp" "$OUT/gpu_session.tar.gz"; }
step() {  # step NAME SECONDS CMD...: run CMD under a time limit, its output in W/NAME.log
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$W/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || failed=$((failed + 1))
  echo "step $name: exit $rc after $((SECONDS - t0)) s (limit $limit s)" | tee -a "$W/steps.log"
  tail -n 5 "$W/$name.log"
  pack
}
if ls .whl/*.whl >/dev/null 2>&1; then
  step wheels 120 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH="$PYTHONPATH:/tmp/site"      # only packages the machine lacks travel as wheels
  export PATH="/tmp/site/bin:$PATH" JUPYTER_PATH=/tmp/site/share/jupyter
fi
step environment 60 bash -c 'nvidia-smi; python3 -c "import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(), torch.backends.cudnn.version())"'
step cuda_tests 240 python3 -m pytest -m cuda -q -p no:cacheprovider tests/test_cuda.py tests/research/test_memcheck_cuda.py
R34=(--model resnet34 --image-size 224 --num-classes 1000 --micro-batches 16 --device cuda)
step memory_s4_mb8 90 python3 -m research.simulator_validation.gpu_memory_check "${R34[@]}" --stages 4 --micro-batch 8 --out "$W/gpu_memory_check_s4_mb8.md"
step calibrate 150 python3 tools/gpu_calibrate.py --out "$W/calibrations"
step selfcheck 170 python3 -m paper_repro.selfcheck --device cuda --json "$W/selfcheck.json" --time-limit 150
step memory_s8_mb8 120 python3 -m research.simulator_validation.gpu_memory_check "${R34[@]}" --stages 8 --micro-batch 8 --out "$W/gpu_memory_check_s8_mb8.md"
step memory_s4_mb32 90 python3 -m research.simulator_validation.gpu_memory_check "${R34[@]}" --stages 4 --micro-batch 32 --out "$W/gpu_memory_check_s4_mb32.md"
# with two GPUs or more: the simulator against real CUDA pipelines (one stage per GPU)
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
if [ "${NGPU:-0}" -ge 2 ]; then
  # the schedules and settings of the CPU validation (docs/simulate.md), on ResNet-34 at 224 px
  step validate_cuda 300 python3 -m research.simulator_validation.validate --device cuda --model resnet34 --image-size 224 \
    --num-classes 1000 --stages 2 --micro-batch 8,32 --micro-batches 16 --steps 3 --warmup-steps 1 \
    --optimizer adam --repeats 3 --schedule local,local-per-step,gpipe,1f1b,1f1b-recompute \
    --validate "$W/validation_cuda.md"
  # the link between two GPUs (NCCL), as the validation's --link auto measures it on cuda
  step link_cuda 90 python3 -c "from research.simulator_validation.linkcal import measure_link; print(measure_link(device='cuda'))"
  # the same runs with each stage's own durations (timed with CUDA events): the engine alone
  step validate_cuda_insitu 120 python3 -m research.simulator_validation.validate --device cuda --stages 2 --in-situ \
    --validate "$W/validation_cuda_insitu.md" --validate-against "$W/validation_cuda.runs.json"
fi
step notebook08_full 150 python3 -m papermill notebooks/08_scaling.ipynb "$W/08_scaling_full.ipynb" -k python3 \
  --cwd notebooks -p profile full -p figures_dir "$W/figures"
echo "failed steps: $failed"
exit $failed
