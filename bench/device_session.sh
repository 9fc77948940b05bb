#!/usr/bin/env bash
# One GPU session's work in phases under a time budget, for a lent machine whose calls are few and bounded (10
# minutes each, the machine given back 30 s after a call): whatever phases fit run, the rest are named as skipped,
# and a second call continues with the phases left. Results go under /tmp/res (tar them into the call's $OUT).
#
#   bash bench/device_session.sh COMMIT BUDGET_S PHASE...
#   phases: machine tests fsdp2-ipc rl-timing rl-fsdp2-ipc frontier-r1 frontier-r3 frontier-r1-slice0 profile-r1 profile-r3
#           blocks-r3 ctas-r1 poll-r1 ipc-profile py-publish-100k layout-ab nccl-tests staging-ab-r1 staging-ab-r3
#           staging-r1 staging-r3 blocks-sweep-r3 nccl-calls ipc-rows blocking-ab ipc-timeline ipc-mps
#           enqueue-ab-r1 enqueue-ab-r3 start-ab-r1 start-ab-r3 start-timeline-r3
#           blocks-timeline-r3 blocks-ab-r1 blocks-ab-r3 probes ipc-push registered register-ab-r1 register-ab-r3
#           asan-tests cuda-sanitizer initcheck-copy racecheck-4 qwen3-r1 qwen3-r3 py-many nccl-env-r1 ipc-one-process
#           ipc-one-process-step nccl-leak
#   fsdp2-ipc: the FSDP2 case over cuda_ipc alone (ranks and engines sharing 2 GPUs), every process's Python stacks
#              printed each minute of a command, and the case failed with its output kept before the budget ends.
#   profile-rN: the nccl frontier rows at 1 GiB buckets with every rank's timeline (wsync-bench gpu --timeline).
#   blocks-r3: the same with 3 receivers at 16 and 256 copy blocks instead of the channel's 64.
#   ipc-one-process: a trainer and its engine in one process over cuda_ipc: the GPU tests of it, and
#                    python/benchmarks/publish.py with the worker in the trainer's process and in one of its own.
#   ipc-one-process-step: that benchmark alone, with a kernel of the trainer's before each timed round (--step-kernel).
#   py-publish-100k: the Python trainer at 100,000 tensors over cuda_ipc beside the C++ agent and torch
#                    (python/benchmarks/publish.py), the publish call's fast path (WSYNC_PUBLISH_SAME_TENSORS) on a GPU.
#   ctas-r1: qwen2.5-7b and 100,000 tensors at 256 MiB and 1 GiB buckets with the channel's communicator held to 8
#            and to 16 CTAs (--nccl-max-ctas): its GPU memory (the memory rows) against its speed.
#   poll-r1: the profile-r1 models at 1 GiB buckets, each rank yielding between looks at its events instead of
#            sleeping 100 us (--nccl-poll-us 0): the timeline's "call - GPU" column against profile-r1's.
#   ipc-profile: cuda_ipc on GPU 0 with each round's stages and hand-offs (wsync-bench gpu --timeline), 100,000
#                tensors and qwen2.5-7b, allocations kept (as the Python trainer vouches); then again with both
#                sides yielding for up to 10 ms before they sleep on the futex (--ipc-spin-us 10000).
#
#   layout-ab: the 100,000-tensor rows with and without the ranks naming their span arrays (--layout-kept: no pass
#              over the 1.6 MB array per round), cuda_ipc (allocations kept, --timeline) and nccl with 1 receiver, one
#              after the other on the same GPUs.
#
#   asan-tests: the C++ GPU tests built under ASan+UBSan (tools/test.sh's build-asan): wsync_gpu_tests, its peer and
#               the coordinator, trainer and worker, stripped of debug information (the stacks' lines come from
#               build-asan's copies), packed as .carry/asan/bin.tgz, with the sanitizer runtimes and the libraries
#               they link, build-asan's libwsync.so.1 among them, in .carry/asan/lib or packed as .carry/asan/lib.tgz
#               (Debian's, not installed on the GPU machines). CI has no GPU, so this is
#               where the GPU channels' host code meets the sanitizers.
#               protect_shadow_gap=0: the CUDA driver maps memory where ASan would otherwise protect its shadow gap.
#   nccl-leak: NCCL's leak under an aborted blocking call with raw NCCL (bench/profiles/nccl_abort_leak.cpp, built
#              under ASan on the Debian machine and carried as .carry/asan/nccl_abort_leak; its sanitizer runtimes from
#              the asan-tests libraries), the blocked broadcast the child's first and then its second, with full stacks.
#   cuda-sanitizer: the C++ GPU tests of the channels themselves (cuda_ipc, and nccl over sockets on one GPU) under
#                   compute-sanitizer, every process they start included: memcheck (with leak checks), racecheck
#                   and synccheck on the copy kernel's shared memory and barriers, initcheck on what it reads.
#                   NCCL's own API errors (it asks for kernel images it was not built for) are not reported.
#                   CUDA_SANITIZER_TOOLS and CUDA_SANITIZER_FILTER (a gtest filter) narrow it: the whole set under
#                   every tool takes longer than one call of the device tool.
#   initcheck-copy: whether initcheck's reports on the cuda_ipc receiver (cuda-sanitizer above) are the tool's: the
#                   copy probe (bench/profiles/copy_ceiling.cu, wsync's copy kernel beside plain copies, built here as
#                   .carry/bin/copy_ceiling) under initcheck with its source written in its own process, then with the
#                   source imported over CUDA IPC from a child that wrote every byte of it (IPC=1).
#   racecheck-4: racecheck on the one channel test the cuda-sanitizer phase left unfinished (4 processes on one GPU).
#   nccl-tests: the C++ GPU tests of the nccl channel alone (wsync_gpu_tests, *Nccl*:*GpuChannel*).
#   staging-ab-rN: 100,000 tensors and qwen2.5-7b at 1 GiB buckets, layout kept, with the staging of protocol 5 (two
#                  buffers of half a bucket) and of protocol 4 (--nccl-max-slice-mib 1024: two whole buckets), one after
#                  the other on the same GPUs: speed and the memory rows.
#   staging-rN: issue 18's nccl rows (every frontier model at 256 MiB to 4 GiB buckets), layout kept, protocol 5.
#   py-many: the Python GPU tests with 100,000 tensors (tests/python/test_many_tensors.py -m gpu: cuda_ipc on one GPU,
#            nccl with two).
#   qwen3-rN: the same rows for Qwen3-30B-A3B (18,867 tensors, 61 GB), the catalog's one model not in them since
#             protocol 5: N receivers at 256 MiB, 1 GiB and 4 GiB buckets, layout kept.
#   nccl-env-r1: whether NCCL's own settings move the 256 MiB rows (a fixed cost per broadcast call of half a bucket)
#                or their memory (the communicator's buffers): the raw broadcast of 4 GiB in one call and in calls of
#                128/256/512 MiB with NCCL's memory per GPU (bench/profiles/chunked_broadcast.cu, carried built as
#                .carry/bin/chunked_broadcast), then the channel's rows for 100,000 tensors and qwen2.5-7b at 256 MiB
#                and 1 GiB buckets, 1 receiver, layout kept, under NCCL's defaults, NCCL_BUFFSIZE of 1, 2 and 8 MiB
#                and NCCL_PROTO=Simple, one after the other (each setting is the whole process's, the raw baseline's
#                included, so its one-call time is compared across settings too).
#   nccl-calls: why a broadcast call takes 0.15-0.45 ms of host time on the channel's non-blocking communicator
#               (--timeline's call and settle times): 100,000 tensors and qwen2.5-7b, 1 receiver, 1 GiB buckets, with
#               NCCL's defaults, NCCL_LOCAL_REGISTER=0 and NCCL_RUNTIME_CONNECT=0; then one round of NCCL_DEBUG=INFO.
#   blocking-ab: 100,000 tensors, qwen2.5-7b and deepseek-v3:8 at 1 GiB buckets, layout kept, 1 and 3 receivers, the
#                channel's communicator blocking (--nccl-enqueue blocking, measurement only) and not (nonblocking),
#                one after the other.
#   enqueue-ab-rN: the same models at 256 MiB, 1 GiB and 4 GiB buckets, N receivers, broadcasts through the guarded
#                  blocking child (the default) and through the non-blocking communicator, one after the other.
#   start-ab-rN: issue 18's nccl rows (100,000 tensors, deepseek-v3:8, qwen2.5-7b at 256 MiB to 4 GiB buckets, layout
#                kept, N receivers) with this build and with the build in .carry/oldbin (its commit in
#                .carry/oldbin/COMMIT), one after the other on the same GPUs.
#   start-timeline-r3: the same models at 1 GiB buckets, 3 receivers, with every rank's timeline (--timeline).
#   ipc-rows: issue 18's cuda_ipc rows on GPU 0, every frontier model, allocations and layout kept (as the Python
#             trainer vouches), one cudaMalloc per tensor; then 100,000 tensors in PyTorch's caching segments.
#   ipc-timeline: cuda_ipc on GPU 0, 100,000 tensors (a cudaMalloc each, then PyTorch's caching segments),
#                 allocations and layout kept, with each round's stages (--timeline).
#   ipc-mps: the ipc-rows models (with --timeline) under CUDA MPS, the sender's and receiver's processes sharing one
#            GPU context; the daemon is stopped after.
#   blocks-sweep-r3: 100,000 tensors and qwen2.5-7b, 3 receivers, 1 GiB buckets, layout kept, at 32 and 48 copy blocks.
#   blocks-timeline-r3: the same at 32, 48, 64 and 96 copy blocks, with every rank's timeline.
#   probes: two nccl communicators taking turns against one (bench/profiles/overlapped_broadcast.cu), and cuda_ipc's
#           copy made by the sender's process against the receiver's (bench/profiles/ipc_push_probe.cu), the latter
#           without MPS and under it. Compiled on the machine with its nvcc.
#   registered: NCCL's user-buffer registration against plain buffers, per-call cost and beside copies, 4 and 2 GPUs.
#   register-ab-rN: 100,000 tensors and qwen2.5-7b at 256 MiB and 1 GiB buckets, N receivers, layout kept, the staging
#                   buffers unregistered and registered with NCCL (--nccl-register), twice in turn.
#   ipc-push: probes' push against pull alone (one GPU), at 4096 and 256 MiB, then at 4096 MiB under MPS.
#   blocks-ab-rN: 100,000 tensors and qwen2.5-7b at 1 and 4 GiB buckets, N receivers, layout kept, the copies beside
#                 the broadcasts at 32 and at 64 blocks (64 in the ramps), twice in turn.
#
# Expects the build carried in .carry/: the relocatable install (bin/, lib/), the test binaries wsync_gpu_tests and
# wsync_test_gpu_peer beside the programs in bin/, and the python component under .carry/py
# (cmake --install build --prefix .carry; cmake --install build --component python --prefix .carry/py).
set -u
commit=$1; budget=$2; shift 2
C=$PWD/.carry; R=/tmp/res; mkdir -p $R
# A lent machine may keep /tmp from an earlier session (seen 2026-11-28): what is older than an hour is not this one's.
find $R -type f -mmin +60 -delete 2>/dev/null
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export WSYNC_TEST_BIN_DIR=$C/bin WSYNC_BIN_DIR=$C/bin WSYNC_LIBRARY=$C/py/wsync/_native/lib/libwsync.so
export PYTHONPATH=$PWD/python WSYNC_COMMIT=$commit WSYNC_LOG_LEVEL=warn
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }
# The Python trainer over cuda_ipc with its worker in its process, then in one of its own (phases ipc-one-process*).
ipc_one_process_publish() {
  local where flag suffix=${1:+-step}
  for where in same cross; do
    (($(left) > 60)) || { echo "== SKIPPED publish $where: $(left) s left"; continue; }
    flag=("$@"); [[ $where == same ]] && flag+=(--same-process)
    timeout $(($(left) - 10)) python3 python/benchmarks/publish.py --channel cuda_ipc "${flag[@]}" \
      --models synthetic:100000:4096 qwen2.5-7b --warmup 2 --reps 10 --commit $commit \
      --out $R/publish-ipc-$where$suffix.md --json $R/publish-ipc-$where$suffix.json > $R/publish-ipc-$where$suffix.log 2>&1
    echo "exit $?" >> $R/publish-ipc-$where$suffix.log
    echo "-- worker in the $where process $*"
    grep -E "^\| (wsync|torch)|^## " $R/publish-ipc-$where$suffix.md | cut -c1-200
    tail -1 $R/publish-ipc-$where$suffix.log
  done
}
for phase in "$@"; do
  t=$(left)
  if ((t < 30)); then echo "== SKIPPED $phase: ${t} s left"; continue; fi
  echo "== $phase (at $((SECONDS - start)) s, ${t} s left)"
  case $phase in
    machine)
      { nvidia-smi -L; nvidia-smi topo -m; date -u; nproc
        python3 -c "import torch,transformers;print('torch',torch.__version__,'transformers',transformers.__version__,'nccl',torch.cuda.nccl.version())"
        python3 -m pytest --version; ldconfig -p | grep nccl
        echo "cpu flags (XXH3's dispatch picks by them):" $(grep -o -w -E 'avx2|avx512f' /proc/cpuinfo | sort | uniq -c)
      } > $R/machine.txt 2>&1
      cat $R/machine.txt ;;
    asan-tests)
      mkdir -p $C/asan/bin $C/asan/lib && tar xzf $C/asan/bin.tgz -C $C/asan/bin
      # Packed too when the libraries (an instrumented libwsync.so among them) would pass the carry's limit.
      [[ -f $C/asan/lib.tgz ]] && tar xzf $C/asan/lib.tgz -C $C/asan/lib
      ( export WSYNC_TEST_BIN_DIR=$C/asan/bin LD_LIBRARY_PATH=$C/asan/lib
        export ASAN_OPTIONS=protect_shadow_gap=0:halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1
        export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp
        timeout $((t - 10)) $C/asan/bin/wsync_gpu_tests > $R/gpu-tests-asan.log 2>&1
        echo "exit $?" >> $R/gpu-tests-asan.log )
      grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|ERROR: |runtime error|^exit" $R/gpu-tests-asan.log | head -40 ;;
    nccl-leak)
      mkdir -p $C/asan/lib && [[ -f $C/asan/lib.tgz ]] && tar xzf $C/asan/lib.tgz -C $C/asan/lib
      for which in first late; do
        ( export LD_LIBRARY_PATH=$C/asan/lib
          export ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1:fast_unwind_on_malloc=0
          timeout $((t / 2 - 10)) $C/asan/nccl_abort_leak $which > $R/nccl-leak-$which.log 2>&1
          echo "exit $?" >> $R/nccl-leak-$which.log )
        echo "-- the blocked broadcast: $which"
        grep -E "^rank|SUMMARY|^exit|Direct leak|Indirect leak" $R/nccl-leak-$which.log | head -30
      done ;;
    cuda-sanitizer)
      cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
      filter=${CUDA_SANITIZER_FILTER:-'CudaIpcChannelTransfer.*:FaultRound/GpuChannelDeadPeer.CudaIpc*:Placements/*OneGpuOverSockets'}
      for tool in ${CUDA_SANITIZER_TOOLS:-memcheck racecheck synccheck initcheck}; do
        extra=(); [[ $tool == memcheck ]] && extra=(--leak-check full)
        s=$(left); ((s < 40)) && { echo "== SKIPPED $tool: ${s} s left"; continue; }
        log=$R/cuda-sanitizer-$tool.log
        LD_LIBRARY_PATH=$C/lib timeout $((s - 10)) "$cs" --tool $tool "${extra[@]}" --target-processes all \
          --report-api-errors no --error-exitcode 99 $C/bin/wsync_gpu_tests --gtest_filter="$filter" >> $log 2>&1
        echo "exit $?" >> $log
        echo "-- $tool:"; grep -E "^\[  (PASSED|FAILED) |SUMMARY|^exit" $log | sort | uniq -c | head
      done ;;
    initcheck-copy)
      cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
      for mode in local ipc; do
        log=$R/initcheck-copy-$mode.log; ipc=(); [[ $mode == ipc ]] && ipc=(IPC=1)
        env "${ipc[@]}" timeout $(($(left) / 2)) "$cs" --tool initcheck --target-processes all --report-api-errors no \
          --print-limit 20 $C/bin/copy_ceiling $((64 << 20)) 45056 > $log 2>&1
        echo "exit $?" >> $log
        echo "-- $mode:"; grep -E "ERROR SUMMARY|^exit|Uninitialized __global__" $log | sort | uniq -c | head
        grep -E "^=+ +at .*(copy|Copy)" $log | sort | uniq -c | head
      done ;;
    racecheck-4)
      cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
      log=$R/cuda-sanitizer-racecheck-4.log
      LD_LIBRARY_PATH=$C/lib timeout $(($(left) - 10)) "$cs" --tool racecheck --target-processes all \
        --report-api-errors no --error-exitcode 99 $C/bin/wsync_gpu_tests --gtest_filter='*EveryOtherRankReceives*' \
        > $log 2>&1
      echo "exit $?" >> $log
      grep -E "^\[  (PASSED|FAILED) |SUMMARY|^exit" $log | sort | uniq -c | head ;;
    tests)
      # The C++ and the Python GPU tests side by side: minutes saved, and the C++ dead-peer cases passed so on
      # 4 x H100 (2026-11-28), but the slowest Python case may then not finish inside the budget.
      ( LD_LIBRARY_PATH=$C/lib timeout $((t - 10)) $C/bin/wsync_gpu_tests > $R/gpu-tests.log 2>&1
        echo "exit $?" >> $R/gpu-tests.log ) &
      cxx=$!
      WSYNC_SCENARIO_RECORDS=$R/scenarios timeout $((t - 10)) python3 -m pytest tests/python -m gpu -p no:cacheprovider \
        -v -rs --durations=0 \
        > $R/python-gpu-tests.log 2>&1
      echo "pytest exit $?" >> $R/python-gpu-tests.log
      wait $cxx
      grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|^exit" $R/gpu-tests.log | head -40
      grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed|exit" $R/python-gpu-tests.log | grep -v "^tests/python.*PASSED" | tail -n 30 ;;
    fsdp2-ipc)
      WSYNC_SCENARIO_RECORDS=$R/fsdp2-ipc WSYNC_SCENARIO_TIMEOUT_S=$((t - 30)) WSYNC_SCENARIO_STALL_DUMP_S=60 \
        timeout $((t - 10)) python3 -m pytest tests/python/test_rl_scenarios.py -m gpu -k "fsdp2 and cuda_ipc" \
        -p no:cacheprovider -v -rs --durations=0 > $R/fsdp2-ipc.log 2>&1
      echo "pytest exit $?" >> $R/fsdp2-ipc.log
      tail -n 15 $R/fsdp2-ipc.log ;;
    profile-r1 | profile-r3)
      timeout $t bash bench/nccl_frontier.sh --receivers ${phase#profile-r} --slices 64 --buckets 1024 --timeline \
        $R/profile qwen2.5-7b synthetic:100000:4096 deepseek-v3:8 ;;
    blocks-r3)
      for blocks in 16 256; do
        (($(left) > 60)) || { echo "== SKIPPED blocks $blocks: $(left) s left"; continue; }
        timeout $(left) bash bench/nccl_frontier.sh --receivers 3 --slices 64 --buckets 1024 --copy-blocks $blocks \
          --timeline $R/profile qwen2.5-7b synthetic:100000:4096
      done ;;
    ctas-r1)
      for ctas in 8 16; do
        (($(left) > 60)) || { echo "== SKIPPED ctas $ctas: $(left) s left"; continue; }
        timeout $(left) bash bench/nccl_frontier.sh --receivers 1 --slices 64 --buckets "256 1024" --max-ctas $ctas \
          $R/ctas qwen2.5-7b synthetic:100000:4096
        sed -n '/GPU memory beyond/,/^Method/p' $R/ctas/nccl-r1-ctas$ctas-slice64.md | grep "^| [sq]"
      done ;;
    poll-r1)
      timeout $t bash bench/nccl_frontier.sh --receivers 1 --slices 64 --buckets 1024 --poll-us 0 --timeline \
        $R/profile qwen2.5-7b synthetic:100000:4096 ;;
    ipc-profile)
      for spin in 0 10000; do
        (($(left) > 60)) || { echo "== SKIPPED ipc spin $spin: $(left) s left"; continue; }
        LD_LIBRARY_PATH=$C/lib timeout $(left) $C/bin/wsync-bench gpu --channel cuda_ipc --allocations-kept \
          --timeline --ipc-spin-us $spin --models synthetic:100000:4096 qwen2.5-7b --warmup 2 --reps 10 \
          --commit $commit --out $R/ipc-profile-spin$spin.md --json $R/ipc-profile-spin$spin.json \
          > $R/ipc-profile-spin$spin.log 2>&1
        echo "exit $?" >> $R/ipc-profile-spin$spin.log
        grep "^| synthetic\|^| qwen" $R/ipc-profile-spin$spin.md | head -24
      done ;;
    layout-ab)
      for layout in "" --layout-kept; do
        (($(left) > 60)) || { echo "== SKIPPED layout-ab ${layout:-read}: $(left) s left"; continue; }
        name=ipc-layout${layout:+-kept}
        LD_LIBRARY_PATH=$C/lib timeout $(left) $C/bin/wsync-bench gpu --channel cuda_ipc --allocations-kept $layout \
          --timeline --models synthetic:100000:4096 --warmup 2 --reps 10 --commit $commit --out $R/$name.md \
          --json $R/$name.json > $R/$name.log 2>&1
        echo "exit $?" >> $R/$name.log
        grep "^| synthetic" $R/$name.md | head -3
      done
      for layout in "" --layout-kept; do
        (($(left) > 60)) || { echo "== SKIPPED layout-ab nccl ${layout:-read}: $(left) s left"; continue; }
        timeout $(left) bash bench/nccl_frontier.sh --receivers 1 --slices 64 --buckets 1024 $layout --timeline \
          $R/layout synthetic:100000:4096
      done ;;
    nccl-tests)
      LD_LIBRARY_PATH=$C/lib timeout $t $C/bin/wsync_gpu_tests --gtest_filter='*Nccl*:*GpuChannel*' \
        > $R/nccl-tests.log 2>&1
      echo "exit $?" >> $R/nccl-tests.log
      grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|^exit|Failure" $R/nccl-tests.log | head -40 ;;
    staging-ab-r1 | staging-ab-r3)
      for max in 0 1024; do
        (($(left) > 60)) || { echo "== SKIPPED staging max $max: $(left) s left"; continue; }
        timeout $(left) bash bench/nccl_frontier.sh --receivers ${phase#staging-ab-r} --slices 64 --buckets 1024 \
          --layout-kept --max-slice-mib $max $R/staging synthetic:100000:4096 qwen2.5-7b
        sed -n '/GPU memory beyond/,/^Method/p' $R/staging/nccl-r${phase#staging-ab-r}-layout-max$max-slice64.md | grep "^| [sq]"
      done ;;
    staging-r1 | staging-r3)
      timeout $t bash bench/nccl_frontier.sh --receivers ${phase#staging-r} --slices 64 --layout-kept $R/staging \
        synthetic:100000:4096 deepseek-v3:8 qwen2.5-7b
      sed -n '/GPU memory beyond/,/^Method/p' $R/staging/nccl-r${phase#staging-r}-layout-slice64.md | grep "^| [sqd]" ;;
    py-many)
      timeout $t python3 -m pytest tests/python/test_many_tensors.py -m gpu -p no:cacheprovider -v -rs --durations=0 \
        > $R/py-many.log 2>&1
      echo "pytest exit $?" >> $R/py-many.log
      grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed|exit" $R/py-many.log | tail -n 8 ;;
    qwen3-r1 | qwen3-r3)
      timeout $t bash bench/nccl_frontier.sh --receivers ${phase#qwen3-r} --slices 64 --layout-kept $R/qwen3 qwen3-30b-a3b
      sed -n '/GPU memory beyond/,/^Method/p' $R/qwen3/nccl-r${phase#qwen3-r}-layout-slice64.md | grep "^| [q]" ;;
    nccl-env-r1)
      for env in NCCL_DEBUG=WARN NCCL_BUFFSIZE=1048576 NCCL_BUFFSIZE=2097152 NCCL_BUFFSIZE=8388608 NCCL_PROTO=Simple; do
        (($(left) > 50)) || { echo "== SKIPPED nccl-env-r1 $env: $(left) s left"; continue; }
        echo "== $env"
        mkdir -p $R/env/$env
        env $env timeout 60 $C/bin/chunked_broadcast 2 4096 128 256 512 2>&1 | tee $R/env/$env/raw.txt
        env $env timeout $(left) bash bench/nccl_frontier.sh --receivers 1 --slices 64 --buckets "256 1024" \
          --layout-kept $R/env/$env synthetic:100000:4096 qwen2.5-7b > $R/env/$env/rows.log 2>&1
        grep -E "^ (synthetic|qwen)" $R/env/$env/rows.log
        sed -n '/GPU memory beyond/,/^Method/p' $R/env/$env/nccl-r1-layout-slice64.md | grep "^| [sq].*sender"
      done ;;
    nccl-calls)
      for env in NCCL_DEBUG=WARN NCCL_LOCAL_REGISTER=0 NCCL_RUNTIME_CONNECT=0; do
        (($(left) > 60)) || { echo "== SKIPPED nccl-calls $env: $(left) s left"; continue; }
        echo "== $env"
        env $env timeout $(left) bash bench/nccl_frontier.sh --receivers 1 --slices 64 --buckets 1024 --layout-kept \
          --timeline $R/calls/$env synthetic:100000:4096 qwen2.5-7b
      done
      (($(left) > 60)) && NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,REG,ENV,TUNING LD_LIBRARY_PATH=$C/lib timeout $(left) \
        $C/bin/wsync-bench gpu --channel nccl --models qwen2.5-7b --bucket-mib 1024 --receivers 1 --warmup 1 --reps 2 \
        --layout-kept --out $R/calls/debug.md > $R/calls/debug.log 2>&1
      grep -i -E "regist|runtime|nonblock|blocking" $R/calls/debug.log | sort | uniq -c | sort -rn | head -20 ;;
    blocking-ab)
      for receivers in 1 3; do
        for mode in blocking nonblocking; do
          (($(left) > 40)) || { echo "== SKIPPED blocking-ab r$receivers $mode: $(left) s left"; continue; }
          timeout $(left) bash bench/nccl_frontier.sh --receivers $receivers --slices 64 --buckets 1024 --layout-kept \
            --enqueue $mode $R/blocking synthetic:100000:4096 qwen2.5-7b deepseek-v3:8
        done
      done ;;
    enqueue-ab-r*)
      receivers=${phase#enqueue-ab-r}
      for mode in child nonblocking; do
        (($(left) > 40)) || { echo "== SKIPPED $phase $mode: $(left) s left"; continue; }
        timeout $(left) bash bench/nccl_frontier.sh --receivers $receivers --slices 64 --layout-kept \
          --enqueue $mode $R/enqueue synthetic:100000:4096 deepseek-v3:8 qwen2.5-7b
        sed -n '/GPU memory beyond/,/^Method/p' $R/enqueue/nccl-r$receivers-layout-$mode-slice64.md | grep "^| [sqd]"
      done ;;
    register-ab-r*)
      receivers=${phase#register-ab-r}
      for round in 1 2; do
        for register in "" --register; do
          (($(left) > 40)) || { echo "== SKIPPED $phase $round $register: $(left) s left"; continue; }
          echo "== round $round ${register:-unregistered}"
          timeout $(left) bash bench/nccl_frontier.sh --receivers $receivers --slices 64 --buckets "256 1024" \
            --layout-kept $register $R/register-$round synthetic:100000:4096 qwen2.5-7b
        done
      done ;;
    start-ab-r*)
      receivers=${phase#start-ab-r}
      for build in new old; do
        (($(left) > 40)) || { echo "== SKIPPED $phase $build: $(left) s left"; continue; }
        echo "== $build"
        if [[ $build == old ]]; then
          WSYNC_COMMIT=$(cat $C/oldbin/COMMIT) WSYNC_BIN_DIR=$C/oldbin timeout $(left) bash bench/nccl_frontier.sh \
            --receivers $receivers --slices 64 --layout-kept $R/start-old synthetic:100000:4096 deepseek-v3:8 qwen2.5-7b
        else
          timeout $(left) bash bench/nccl_frontier.sh --receivers $receivers --slices 64 --layout-kept $R/start \
            synthetic:100000:4096 deepseek-v3:8 qwen2.5-7b
        fi
      done ;;
    start-timeline-r3)
      timeout $t bash bench/nccl_frontier.sh --receivers 3 --slices 64 --buckets 1024 --layout-kept --timeline \
        $R/start synthetic:100000:4096 deepseek-v3:8 qwen2.5-7b ;;
    blocks-ab-r*)
      receivers=${phase#blocks-ab-r}
      for round in 1 2; do
        for blocks in 32 64; do
          (($(left) > 40)) || { echo "== SKIPPED $phase $round $blocks: $(left) s left"; continue; }
          timeout $(left) bash bench/nccl_frontier.sh --receivers $receivers --slices 64 --buckets "1024 4096" \
            --copy-blocks $blocks --ramp-copy-blocks 64 --layout-kept $R/blocks-ab-$round synthetic:100000:4096 qwen2.5-7b
        done
      done ;;
    ipc-rows)
      for allocation in tensor torch; do
        (($(left) > 60)) || { echo "== SKIPPED ipc-rows $allocation: $(left) s left"; continue; }
        # qwen3-30b-a3b only in torch's segments: with a cudaMalloc for each of its 18,867 tensors, sender and
        # receiver do not fit one H200 (the receiver ran out at tensor 16,203 on 2026-11-28).
        models="synthetic:100000:4096 deepseek-v3:8 qwen2.5-7b"
        [[ $allocation == torch ]] && models="synthetic:100000:4096 qwen3-30b-a3b"
        LD_LIBRARY_PATH=$C/lib timeout $(left) $C/bin/wsync-bench gpu --channel cuda_ipc --allocations-kept \
          --layout-kept --allocation $allocation --models $models --warmup 2 --reps 10 --commit $commit \
          --out $R/ipc-rows-$allocation.md --json $R/ipc-rows-$allocation.json > $R/ipc-rows-$allocation.log 2>&1
        echo "exit $?" >> $R/ipc-rows-$allocation.log
        grep -E "^\| (synthetic|deepseek|qwen)[^|]*\| [0-9]+ \|" $R/ipc-rows-$allocation.md | cut -d'|' -f2,3,8,10,12,13,14,16,21-24
      done ;;
    ipc-timeline)
      for allocation in tensor torch; do
        (($(left) > 60)) || { echo "== SKIPPED ipc-timeline $allocation: $(left) s left"; continue; }
        LD_LIBRARY_PATH=$C/lib timeout $(left) $C/bin/wsync-bench gpu --channel cuda_ipc --allocations-kept \
          --layout-kept --timeline --allocation $allocation --models synthetic:100000:4096 --warmup 2 --reps 10 \
          --commit $commit --out $R/ipc-timeline-$allocation.md --json $R/ipc-timeline-$allocation.json \
          > $R/ipc-timeline-$allocation.log 2>&1
        echo "exit $?" >> $R/ipc-timeline-$allocation.log
        grep -E "^\| synthetic" $R/ipc-timeline-$allocation.md | cut -d'|' -f2-4,8,10,12,13 | head -14
      done ;;
    ipc-mps)
      # The same rows with the sender's and the receiver's processes in one GPU context (CUDA MPS): what the GPU's
      # switching between the two processes' contexts costs each round.
      export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
      mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
      CUDA_VISIBLE_DEVICES=0 nvidia-cuda-mps-control -d || { echo "== SKIPPED ipc-mps: no MPS daemon"; continue; }
      for allocation in tensor torch; do
        (($(left) > 60)) || { echo "== SKIPPED ipc-mps $allocation: $(left) s left"; continue; }
        models="synthetic:100000:4096 deepseek-v3:8 qwen2.5-7b"
        [[ $allocation == torch ]] && models=synthetic:100000:4096
        LD_LIBRARY_PATH=$C/lib timeout $(left) $C/bin/wsync-bench gpu --channel cuda_ipc --allocations-kept \
          --layout-kept --timeline --allocation $allocation --models $models --warmup 2 --reps 10 --commit $commit \
          --out $R/ipc-mps-$allocation.md --json $R/ipc-mps-$allocation.json > $R/ipc-mps-$allocation.log 2>&1
        echo "exit $?" >> $R/ipc-mps-$allocation.log
        grep -E "^\| (synthetic|deepseek|qwen)[^|]*\| [0-9]+ \| [0-9.]+ GiB" $R/ipc-mps-$allocation.md | cut -d'|' -f2,3,8,10,12,13,14,16,21-24
      done
      echo quit | nvidia-cuda-mps-control
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY ;;
    probes)
      # bench/profiles/overlapped_broadcast.cu (two communicators taking turns) on 4 and 2 GPUs, and
      # bench/profiles/ipc_push_probe.cu (push against pull on one GPU) without MPS and under it.
      nvcc -O2 -std=c++17 -arch=sm_90 -o /tmp/overlapped bench/profiles/overlapped_broadcast.cu -lnccl &&
        nvcc -O2 -std=c++17 -arch=sm_90 -o /tmp/ipc_push bench/profiles/ipc_push_probe.cu -lcuda || continue
      for gpus in 4 2; do
        (($(left) > 60)) || { echo "== SKIPPED overlapped $gpus: $(left) s left"; continue; }
        timeout -k 5 $(($(left) / 2)) /tmp/overlapped $gpus 4096 512 256 128 64 | tee -a $R/probes.txt
      done
      # What each broadcast call's fixed ~20 us is made of: if it is the ring's step (NCCL_BUFFSIZE / 8 a channel),
      # smaller buffers shrink it, and the communicator's memory with it; larger ones grow it.
      nvcc -O2 -std=c++17 -arch=sm_90 -o /tmp/chunked bench/profiles/chunked_broadcast.cu -lnccl &&
        for buffsize in default 1048576 16777216; do
          (($(left) > 60)) || { echo "== SKIPPED chunked $buffsize: $(left) s left"; continue; }
          echo "chunked_broadcast, NCCL_BUFFSIZE $buffsize:" | tee -a $R/probes.txt
          if [[ $buffsize == default ]]; then
            timeout -k 5 60 /tmp/chunked 4 4096 512 128 64 | tee -a $R/probes.txt
          else
            NCCL_BUFFSIZE=$buffsize timeout -k 5 60 /tmp/chunked 4 4096 512 128 64 | tee -a $R/probes.txt
          fi
        done
      (($(left) > 40)) && timeout -k 5 60 /tmp/ipc_push 4096 | tee -a $R/probes.txt
      export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
      mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
      if (($(left) > 40)) && CUDA_VISIBLE_DEVICES=0 nvidia-cuda-mps-control -d; then
        echo "under MPS:" | tee -a $R/probes.txt
        timeout -k 5 60 /tmp/ipc_push 4096 | tee -a $R/probes.txt
        echo quit | nvidia-cuda-mps-control
      fi
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY ;;
    registered)
      # NCCL's intra-node user-buffer registration against plain buffers (bench/profiles/registered_broadcast.cu): each
      # call's fixed cost, and the broadcasts beside a copy kernel on the receivers, on every GPU and then on 2.
      nvcc -O2 -std=c++17 -arch=sm_90 -o /tmp/registered bench/profiles/registered_broadcast.cu -lnccl || continue
      gpus=$(nvidia-smi -L | wc -l)
      for n in $( ((gpus >= 4)) && echo 4) $( ((gpus >= 2)) && echo 2); do
        (($(left) > 60)) || { echo "== SKIPPED registered $n: $(left) s left"; continue; }
        timeout -k 5 $(($(left) - 20)) /tmp/registered $n 4096 512 128 64 | tee -a $R/registered.txt
      done ;;
    ipc-push)
      # probes' last part alone, for a machine of one GPU: bench/profiles/ipc_push_probe.cu without MPS and under it.
      nvcc -O2 -std=c++17 -arch=sm_90 -o /tmp/ipc_push bench/profiles/ipc_push_probe.cu -lcuda || continue
      for mib in 4096 256; do
        echo "ipc_push_probe $mib MiB:" | tee -a $R/ipc-push.txt
        timeout -k 5 60 /tmp/ipc_push $mib | tee -a $R/ipc-push.txt
      done
      export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
      mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
      if (($(left) > 40)) && CUDA_VISIBLE_DEVICES=0 nvidia-cuda-mps-control -d; then
        echo "under MPS, ipc_push_probe 4096 MiB:" | tee -a $R/ipc-push.txt
        timeout -k 5 60 /tmp/ipc_push 4096 | tee -a $R/ipc-push.txt
        echo quit | nvidia-cuda-mps-control
      fi
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY ;;
    blocks-sweep-r3)
      for blocks in 32 48; do
        (($(left) > 60)) || { echo "== SKIPPED blocks $blocks: $(left) s left"; continue; }
        timeout $(left) bash bench/nccl_frontier.sh --receivers 3 --slices 64 --buckets 1024 --copy-blocks $blocks \
          --layout-kept $R/staging synthetic:100000:4096 qwen2.5-7b
      done ;;
    blocks-timeline-r3)
      for blocks in 32 48 64 96; do
        (($(left) > 40)) || { echo "== SKIPPED blocks $blocks: $(left) s left"; continue; }
        timeout $(left) bash bench/nccl_frontier.sh --receivers 3 --slices 64 --buckets 1024 --copy-blocks $blocks \
          --layout-kept --timeline $R/blocks synthetic:100000:4096 qwen2.5-7b | grep -v "receiver [12]"
      done ;;
    ipc-one-process)
      # A trainer and its engine in one process over cuda_ipc (verl's hybrid engine): the tests, then the Python
      # trainer with its worker in its process and in a process of its own, in the same run, beside torch's copies.
      LD_LIBRARY_PATH=$C/lib timeout $((t / 4)) $C/bin/wsync_gpu_tests \
        --gtest_filter='CudaIpcOneProcess*:CudaIpcChannelTransfer*' > $R/ipc-one-process-tests.log 2>&1
      echo "exit $?" >> $R/ipc-one-process-tests.log
      timeout $((t / 4)) python3 -m pytest tests/python/test_gpu.py -m gpu -k one_process -p no:cacheprovider -v -rs \
        >> $R/ipc-one-process-tests.log 2>&1
      echo "pytest exit $?" >> $R/ipc-one-process-tests.log
      grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|^exit|passed|failed" $R/ipc-one-process-tests.log
      ipc_one_process_publish ;;
    ipc-one-process-step)
      # The same comparison with a kernel of the trainer's just before each timed round, as an optimizer step leaves.
      ipc_one_process_publish --step-kernel ;;
    py-publish-100k)
      timeout $t python3 python/benchmarks/publish.py --channel cuda_ipc --models synthetic:100000:4096 --warmup 1 --reps 5 \
        --out $R/py-publish-100k.md --json $R/py-publish-100k.json > $R/py-publish-100k.log 2>&1
      echo "exit $?" >> $R/py-publish-100k.log
      grep "^| synthetic" $R/py-publish-100k.md | head ;;
    rl-timing)
      # A command stuck past 3 minutes fails its example (stacks printed each minute) rather than the budget.
      WSYNC_SCENARIO_RECORDS=$R/rl WSYNC_SCENARIO_COMMAND_TIMEOUT_S=180 WSYNC_SCENARIO_STALL_DUMP_S=60 \
        timeout $t bash bench/rl_scenarios.sh --no-tests $R/rl ;;
    rl-fsdp2-ipc)
      # rl-timing's last row alone: FSDP2 over cuda_ipc on the timing model (ranks and engines sharing cuda:0-1).
      mkdir -p $R/rl
      WSYNC_SCENARIO_COMMAND_TIMEOUT_S=180 WSYNC_SCENARIO_STALL_DUMP_S=60 timeout $t python3 examples/rl/fsdp2_to_dp.py \
        --json $R/rl/fsdp2-qwen3-0.6b-cuda_ipc.json --model qwen3-0.6b --channel cuda_ipc \
        --trainer-devices cuda:0,cuda:1 --engine-devices cuda:0,cuda:1 > $R/rl/fsdp2-qwen3-0.6b-cuda_ipc.log 2>&1
      echo "exit $?" >> $R/rl/fsdp2-qwen3-0.6b-cuda_ipc.log
      grep -E "gathered in|all checks|FAIL|^exit" $R/rl/fsdp2-qwen3-0.6b-cuda_ipc.log ;;
    frontier-r3)
      timeout $t bash bench/nccl_frontier.sh --receivers 3 --slices 64 $R/frontier ;;
    frontier-r1)
      timeout $t bash bench/nccl_frontier.sh --receivers 1 --slices 64 $R/frontier ;;
    frontier-r1-slice0)
      timeout $t bash bench/nccl_frontier.sh --receivers 1 --slices 0 $R/frontier synthetic:100000:4096 deepseek-v3:8 ;;
    *) echo "unknown phase $phase" ;;
  esac
done
echo "== done at $((SECONDS - start)) s"
