#!/usr/bin/env bash
# The RL scenarios of examples/rl/ on this machine's GPUs, as their GPU tests (tests/python/test_rl_scenarios.py -m gpu:
# the cases that fit the GPUs present) and, for the timing table, async keep mode on a larger model. Each run's JSON
# record and output go to OUT_DIR: what bench/results/rl-scenarios-* hold.
#
#   bench/rl_scenarios.sh [--no-tests] OUT_DIR [TIMING_MODEL]   # TIMING_MODEL: qwen3-0.6b (default), qwen3-1.7b
#   WSYNC_COMMIT=abc1234 bench/rl_scenarios.sh ...               # the commit to name where the tree has no .git
#
# --no-tests: the timings alone (the GPU tests run elsewhere, e.g. beside other tests: the timings must have the
# GPUs to themselves; give them WSYNC_SCENARIO_RECORDS=DIR to keep each example's record and output).
#
# Needs torch with CUDA, transformers, pytest (or python3 -m pytest), and wsync's library and programs
# (WSYNC_LIBRARY, WSYNC_BIN_DIR; PYTHONPATH with python/).
set -uo pipefail
tests=1
if [[ ${1:-} == --no-tests ]]; then tests=0; shift; fi
out=${1:?usage: bench/rl_scenarios.sh [--no-tests] OUT_DIR [TIMING_MODEL]}
timing_model=${2:-qwen3-0.6b}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
export WSYNC_SCENARIO_RECORDS="$out"
status=0
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
echo "== $gpus GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | xargs)"

if ((tests)); then
  echo "== the GPU tests"
  python3 -m pytest tests/python/test_rl_scenarios.py -m gpu -p no:cacheprovider -q -rs 2>&1 | tee "$out/pytest.log" |
    tail -n 25
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
fi

# run LABEL SCRIPT ARGS...: one example with its record and output in OUT_DIR.
run() {
  local label=$1 script=$2
  shift 2
  python3 "examples/rl/$script.py" --json "$out/$label.json" "$@" > "$out/$label.log" 2>&1
  local code=$?
  echo "== $label: exit $code; $(grep -E 'all checks passed|checks FAILED' "$out/$label.log" | tail -n1)"
  grep -E '^V[0-9]+: round|gathered in' "$out/$label.log"
  return $code
}

# The timing table's update rows: wsync against what the seeds do, same run (bench/python/publish.py: per-tensor
# torch.distributed.broadcast and vLLM-style packed buckets over nccl on 2 GPUs; torch copies on one GPU).
echo "== timing: update time per version"
if [[ $gpus -ge 2 ]]; then channel=nccl; else channel=cuda_ipc; fi
python3 bench/python/publish.py --channel "$channel" --models hf:qwen3-0.6b hf:qwen3-1.7b hf:qwen3-1.7b:bf16 \
  --warmup 2 --reps 10 ${WSYNC_COMMIT:+--commit "$WSYNC_COMMIT"} --out "$out/update-time-$channel.md" \
  --json "$out/update-time-$channel.json" > "$out/update-time-$channel.log" 2>&1 || status=1
grep -E '^## |wsync Python \(|per tensor|packed' "$out/update-time-$channel.md"

echo "== timing: async keep mode on $timing_model"
if [[ $gpus -ge 2 ]]; then
  run "async-keep-$timing_model-nccl" async_keep --model "$timing_model" --channel nccl \
    --trainer-device cuda:0 --engine-device cuda:1 --updates 2 || status=1
fi
run "async-keep-$timing_model-cuda_ipc" async_keep --model "$timing_model" --channel cuda_ipc \
  --trainer-device cuda:0 --engine-device cuda:0 --updates 2 || status=1
# FSDP2: the gather (every rank) and the update (rank 0 publishing) per version, on the timing model.
if [[ $gpus -ge 4 ]]; then
  echo "== timing: FSDP2, 2 ranks (nccl) on cuda:0-1 into 2 engines on cuda:2-3"
  run "fsdp2-$timing_model-nccl" fsdp2_to_dp --model "$timing_model" --channel nccl \
    --trainer-devices cuda:0,cuda:1 --engine-devices cuda:2,cuda:3 || status=1
fi
if [[ $gpus -ge 2 ]]; then
  echo "== timing: FSDP2, 2 ranks on cuda:0-1, an engine beside each (cuda_ipc)"
  run "fsdp2-$timing_model-cuda_ipc" fsdp2_to_dp --model "$timing_model" --channel cuda_ipc \
    --trainer-devices cuda:0,cuda:1 --engine-devices cuda:0,cuda:1 || status=1
fi
if [[ $gpus -lt 2 ]]; then
  # FSDP2 needs a GPU per rank (NCCL refuses two ranks on one GPU: "Duplicate GPU detected"): on a one-GPU machine
  # its ranks run on the CPU (gloo) and the workers take the versions over shm.
  echo "== FSDP2 on CPU ranks (gloo), two workers over shm"
  run fsdp2-cpu-gloo-shm fsdp2_to_dp || status=1
fi
exit $status
