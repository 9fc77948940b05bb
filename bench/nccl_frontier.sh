#!/usr/bin/env bash
# Issue 18's nccl rows on this machine's GPUs (2 or more): every catalog shape at every bucket size from 256 MiB to
# 4 GiB, with the slices of protocol 4 (--nccl-first-slice-mib 64, the default) and without them (0: one broadcast
# per bucket, as before), each beside a raw ncclBroadcast of the same bytes in the same run. Output (markdown and
# JSON per setting) goes to OUT_DIR: what bench/results/gpu-nccl-frontier-* hold.
#
#   bench/nccl_frontier.sh [--receivers N] [--slices "64 0"] [--buckets "256 1024 4096"] [--copy-blocks N]
#                          [--max-ctas N] [--poll-us N] [--layout-kept] [--max-slice-mib N] [--buffers N]
#                          [--enqueue MODE] [--ramp-copy-blocks N] [--timeline] OUT_DIR [MODELS...]
#                                                   # MODELS: the default list below
#   WSYNC_COMMIT=abc1234 bench/nccl_frontier.sh ...  # the commit to name where the tree has no .git
#
# --receivers N: ranks on GPUs 1..N receive (default: every GPU but the sender's); files are named with N.
# --slices LIST: the first-slice sizes to measure (MiB; 0 = no ramp).
# --buckets LIST: the bucket sizes (MiB; default the 256 MiB to 4 GiB).
# --copy-blocks N: the pack/unpack kernels' blocks beside the broadcasts (default the channel's; named in the files).
# --max-ctas N: the channel communicator's maxCTAs (wsync-bench gpu --nccl-max-ctas; the raw broadcast keeps NCCL's).
# --poll-us N: how often each rank's transfer looks at its events (wsync-bench gpu --nccl-poll-us; 0: yields).
# --layout-kept: every rank names its span array (wsync-bench gpu --layout-kept, as the Python trainer's repeated
#                publish does): no pass over it per round; files named with -layout.
# --max-slice-mib N: the largest broadcast, each staging buffer's size (wsync-bench gpu --nccl-max-slice-mib; 0, the
#                    default: half a bucket; the bucket's size: whole buckets as protocol 4); files named with -maxN.
# --enqueue MODE: how the channel's broadcasts reach NCCL (wsync-bench gpu --nccl-enqueue: child, the default;
#                nonblocking); files named with -MODE.
# --ramp-copy-blocks N: the blocks of copies beside a smaller broadcast than themselves (wsync-bench gpu
#                       --nccl-ramp-copy-blocks); files named with -rampN.
# --buffers N: staging buffers (wsync-bench gpu --nccl-buffers); files named with -buffersN.
# --timeline: every rank's broadcasts and copies timed with CUDA events (wsync-bench gpu --timeline): the
#             report's "where each rank's time went" table, and each slice in the JSON; files named with -timeline.
# Needs wsync-bench on PATH or WSYNC_BIN_DIR (the relocatable install's bin/, its lib/ on LD_LIBRARY_PATH).
set -uo pipefail
usage() {
  echo "usage: bench/nccl_frontier.sh [--receivers N] [--slices \"64 0\"] [--buckets \"256 1024 4096\"]" \
    "[--copy-blocks N] [--max-ctas N] [--poll-us N] [--layout-kept] [--max-slice-mib N] [--buffers N]" \
    "[--enqueue MODE] [--ramp-copy-blocks N] [--timeline] OUT_DIR [MODELS...]" >&2
  exit 2
}
receivers=()
copy_blocks=()
timeline=()
max_ctas=()
poll=()
layout=()
max_slice=()
buffers=()
enqueue=()
ramp_blocks=()
slices="64 0"
buckets="256 1024 4096"
while [[ $# -gt 0 && $1 == --* ]]; do
  case "$1" in
    --receivers) [[ $# -ge 2 ]] || usage; receivers=(--receivers "$2"); shift 2 ;;
    --slices) [[ $# -ge 2 ]] || usage; slices=$2; shift 2 ;;
    --buckets) [[ $# -ge 2 ]] || usage; buckets=$2; shift 2 ;;
    --copy-blocks) [[ $# -ge 2 ]] || usage; copy_blocks=(--nccl-copy-blocks "$2"); shift 2 ;;
    --timeline) timeline=(--timeline); shift ;;
    --layout-kept) layout=(--layout-kept); shift ;;
    --max-slice-mib) [[ $# -ge 2 ]] || usage; max_slice=(--nccl-max-slice-mib "$2"); shift 2 ;;
    --buffers) [[ $# -ge 2 ]] || usage; buffers=(--nccl-buffers "$2"); shift 2 ;;
    --enqueue) [[ $# -ge 2 ]] || usage; enqueue=(--nccl-enqueue "$2"); shift 2 ;;
    --ramp-copy-blocks) [[ $# -ge 2 ]] || usage; ramp_blocks=(--nccl-ramp-copy-blocks "$2"); shift 2 ;;
    --max-ctas) [[ $# -ge 2 ]] || usage; max_ctas=(--nccl-max-ctas "$2"); shift 2 ;;
    --poll-us) [[ $# -ge 2 ]] || usage; poll=(--nccl-poll-us "$2"); shift 2 ;;
    *) usage ;;
  esac
done
[[ $# -ge 1 ]] || usage
out=$1
shift
models=("$@")
[[ ${#models[@]} -gt 0 ]] || models=(synthetic:100000:4096 deepseek-v3:8 qwen2.5-7b qwen3-30b-a3b)
bench=${WSYNC_BIN_DIR:+$WSYNC_BIN_DIR/}wsync-bench
label=${receivers[1]:+-r${receivers[1]}}${copy_blocks[1]:+-blocks${copy_blocks[1]}}${max_ctas[1]:+-ctas${max_ctas[1]}}${poll[1]:+-poll${poll[1]}}${layout[0]:+-layout}${max_slice[1]:+-max${max_slice[1]}}${buffers[1]:+-buffers${buffers[1]}}${enqueue[1]:+-${enqueue[1]}}${ramp_blocks[1]:+-ramp${ramp_blocks[1]}}${timeline[0]:+-timeline}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
status=0
nvidia-smi -L
for slice in $slices; do
  name="nccl$label-slice$slice"
  echo "== first slice ${slice} MiB${receivers[1]:+, ${receivers[1]} receivers}${copy_blocks[1]:+, ${copy_blocks[1]} copy blocks}"
  "$bench" gpu --channel nccl --models "${models[@]}" --bucket-mib $buckets --warmup 1 --reps 5 "${receivers[@]}" \
    "${copy_blocks[@]}" "${max_ctas[@]}" "${poll[@]}" "${layout[@]}" "${max_slice[@]}" "${buffers[@]}" "${enqueue[@]}" \
    "${ramp_blocks[@]}" "${timeline[@]}" \
    --nccl-first-slice-mib "$slice" ${WSYNC_COMMIT:+--commit "$WSYNC_COMMIT"} \
    --out "$out/$name.md" --json "$out/$name.json" > "$out/$name.log" 2>&1 || status=1
  grep -E "^\| (synthetic|deepseek|qwen)[^|]*\| [0-9]+ \|" "$out/$name.md" | cut -d'|' -f2,4,5,8,10,12,13,14,16
  # The timeline table's rows (model, bucket, rank, ...), when asked for.
  ((${#timeline[@]})) && sed -n '/where each rank/,/^## /p' "$out/$name.md" | grep -E "^\| (synthetic|deepseek|qwen)"
done
exit $status
