#!/usr/bin/env bash
# The work of one call on a lent GPU machine: named steps, each one command, run in the order given under a time
# budget. A step that would start with less than MIN_STEP_S left is named as skipped, so a second call can run it.
# Each step's output goes to /tmp/res/STEP.log (tar /tmp/res into the call's $OUT to bring it back); its last lines
# are printed.
#
#   bash bench/device.sh COMMIT BUDGET_S STEP...      # bash bench/device.sh --list: the steps
#
# Expects the build carried in .carry/ (docs/testing.md, "GPU tests"): the relocatable install (bin/, lib/), the test
# binaries wsync_gpu_tests and wsync_test_gpu_peer beside the programs in bin/, and the python component in .carry/py
# (cmake --install build --prefix .carry; cmake --install build --component python --prefix .carry/py).
# BENCH=PATH runs the benchmark steps with another build's wsync-bench (a before/after pair on the same GPUs).
# Experiments beyond these steps are one-off commands of their own; their results say how they were made.
set -u

# A step is not started with less time than this left (seconds): it could not finish.
readonly MIN_STEP_S=30
# What a step's command may use of the time left (seconds kept back to write its log and the summary).
readonly STEP_MARGIN_S=10
# The GPU channels' rows: a model of many small tensors and a real model's shapes.
readonly ROW_MODELS="synthetic:100000:4096 qwen2.5-7b"

declare -A STEP STEP_WHY
STEP[machine]='nvidia-smi -L; nvidia-smi topo -m; date -u; nproc
  python3 -c "import torch; print(\"torch\", torch.__version__, \"nccl\", torch.cuda.nccl.version())"
  ldconfig -p | grep nccl'
STEP_WHY[machine]="what the machine is (GPUs, links, CPUs, torch and NCCL)"
STEP[tests]='$C/bin/wsync_gpu_tests'
STEP_WHY[tests]="the C++ GPU tests (cuda_ipc, nccl over sockets on one GPU and between GPUs where there are several)"
STEP[python-tests]='python3 -m pytest tests/python -m gpu -p no:cacheprovider -v -rs --durations=0'
STEP_WHY[python-tests]="the Python GPU tests (the Trainer and Worker over cuda_ipc and nccl, the RL scenarios)"
STEP[cuda-sanitizer]='for tool in memcheck racecheck synccheck initcheck; do
    compute-sanitizer --tool $tool --target-processes all --report-api-errors no --error-exitcode 99 \
      $C/bin/wsync_gpu_tests --gtest_filter="CudaIpcChannelTransfer.*:Placements/*OneGpuOverSockets" || exit
  done'
STEP_WHY[cuda-sanitizer]="the channels' own GPU tests under compute-sanitizer's four tools (NCCL's API errors aside)"
STEP[asan-tests]='mkdir -p $C/asan/bin $C/asan/lib && tar xzf $C/asan/bin.tgz -C $C/asan/bin &&
  { [[ ! -f $C/asan/lib.tgz ]] || tar xzf $C/asan/lib.tgz -C $C/asan/lib; } &&
  WSYNC_TEST_BIN_DIR=$C/asan/bin LD_LIBRARY_PATH=$C/asan/lib LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp \
  ASAN_OPTIONS=protect_shadow_gap=0:halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $C/asan/bin/wsync_gpu_tests'
# protect_shadow_gap=0: the CUDA driver maps memory where ASan would otherwise protect its shadow gap.
STEP_WHY[asan-tests]="the C++ GPU tests under ASan+UBSan (tools/test.sh's build-asan, packed as .carry/asan/*.tgz)"
STEP[ipc-rows]='$BENCH gpu --channel cuda_ipc --allocations-kept --layout-kept --models $ROW_MODELS \
    --warmup 2 --reps 10 --commit $COMMIT --out $R/ipc-rows.md --json $R/ipc-rows.json'
STEP_WHY[ipc-rows]="cuda_ipc on one GPU against a device copy of the same bytes in the same run"
STEP[nccl-rows]='$BENCH gpu --channel nccl --receivers 1 --layout-kept --bucket-mib 1024 \
    --models $ROW_MODELS --warmup 2 --reps 10 --commit $COMMIT --out $R/nccl-rows.md --json $R/nccl-rows.json'
STEP_WHY[nccl-rows]="nccl, one receiver on another GPU, against a raw ncclBroadcast of the same bytes (2 GPUs)"
STEP[nccl-socket-rows]='$BENCH gpu --channel nccl --nccl-network --receivers 1 --layout-kept \
    --bucket-mib 1024 --models $ROW_MODELS --warmup 1 --reps 5 --commit $COMMIT --out $R/nccl-socket-rows.md \
    --json $R/nccl-socket-rows.json'
STEP_WHY[nccl-socket-rows]="nccl through NCCL's socket transport, both ranks on one GPU, against raw NCCL the same way"
STEP[regions]='$BENCH regions --models qwen2.5-7b,deepseek-v3:8 --sources 1,2,4,8 --layouts whole,tp2 \
    --source-allocation tensor --receiver-allocation tensor --warmup 2 --reps 5 --commit $COMMIT \
    --out $R/regions.md --json $R/regions.json'
STEP_WHY[regions]="region rounds over cuda_ipc: M sharded sources into whole or TP receivers, against a device copy"
STEP[publish]='python3 bench/python/publish.py --channel cuda_ipc --models $ROW_MODELS --warmup 2 --reps 10 \
    --commit $COMMIT --out $R/publish.md --json $R/publish.json'
STEP_WHY[publish]="the Python trainer's publish over cuda_ipc beside the C++ agent and a torch copy"

if [[ ${1:-} == --list || $# -lt 3 ]]; then
  echo "Usage: bash bench/device.sh COMMIT BUDGET_S STEP..."
  for name in $(printf '%s\n' "${!STEP[@]}" | sort); do printf '  %-17s %s\n' "$name" "${STEP_WHY[$name]}"; done
  [[ ${1:-} == --list ]]
  exit
fi
COMMIT=$1 BUDGET_S=$2
shift 2
for name in "$@"; do
  [[ -n ${STEP[$name]:-} ]] || { echo "device.sh: no step '$name' (--list names them)" >&2; exit 2; }
done

C=$PWD/.carry R=/tmp/res
mkdir -p "$R"
# A lent machine may keep /tmp from an earlier session: what is older than an hour is not this one's.
find "$R" -type f -mmin +60 -delete 2>/dev/null
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export WSYNC_TEST_BIN_DIR=$C/bin WSYNC_BIN_DIR=$C/bin WSYNC_LIBRARY=$C/py/wsync/_native/lib/libwsync.so
export PYTHONPATH=$PWD/python LD_LIBRARY_PATH=$C/lib WSYNC_COMMIT=$COMMIT WSYNC_LOG_LEVEL=warn
BENCH=${BENCH:-$C/bin/wsync-bench}
export C R COMMIT ROW_MODELS BENCH
start=$SECONDS
for name in "$@"; do
  left=$((BUDGET_S - (SECONDS - start)))
  if ((left < MIN_STEP_S)); then echo "== SKIPPED $name: $left s left"; continue; fi
  echo "== $name (at $((SECONDS - start)) s, $left s left): ${STEP_WHY[$name]}"
  timeout $((left - STEP_MARGIN_S)) bash -c "${STEP[$name]}" > "$R/$name.log" 2>&1
  echo "exit $?" >> "$R/$name.log"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|passed|failed|SUMMARY|^\| (synthetic|qwen)" "$R/$name.log" |
    cut -c1-200 | tail -n 20
  tail -n 1 "$R/$name.log"
done
