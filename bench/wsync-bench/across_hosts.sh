#!/usr/bin/env bash
# Runs `wsync-bench bus` across hosts of a rig (tests/hosts/rig.sh, docs/hosts-rig.md): network namespaces of this
# machine, each with one veth link to a bridge. The benchmark runs on host 'coord' and binds there; its agents run
# round-robin on hosts w1..wK and connect over tcp, with CURVE unless --plain. Needs root; the rig is removed on
# every exit path. Options after the benchmark's path go to it (--quick, --agents, --out, --json, ...).
#
#   bench/wsync-bench/across_hosts.sh [--agent-hosts K] [--port PORT] [--plain] WSYNC_BENCH bus [BENCH OPTIONS...]
#
# Exit status: the benchmark's; 2 usage; 77 (the reason on stderr) when no rig can be made here, as rig.sh check.
set -euo pipefail

readonly EXIT_USAGE=2
readonly EXIT_UNAVAILABLE=77
# Agent hosts by default: fan-outs of 8 and 32 agents then cross three links, not one.
agent_host_count=3
# The bus path's requests port; the benchmark takes it and the next five (README, "bus across hosts").
port=5555
curve=--curve

usage() {
  sed -n '2,9s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
  exit "$EXIT_USAGE"
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --agent-hosts)
      [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]?$ ]] || usage
      agent_host_count="$2"
      shift 2
      ;;
    --port)
      [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]{0,4}$ && "$2" -le 65529 ]] || usage
      port="$2"
      shift 2
      ;;
    --plain) curve=""; shift ;;
    -h | --help) usage ;;
    *) break ;;
  esac
done
[[ $# -ge 2 && "$2" == bus ]] || usage
bench="$(readlink -f "$1")"
shift 2
[[ -x "$bench" ]] || { echo "across_hosts.sh: no executable $bench" >&2; exit "$EXIT_USAGE"; }

# The rig script of this source tree, or the one WSYNC_RIG_SCRIPT names (a copy beside the test binaries).
rig_sh="$(readlink -f "${WSYNC_RIG_SCRIPT:-$(dirname "${BASH_SOURCE[0]}")/../../tests/hosts/rig.sh}")"
if ! reason="$("$rig_sh" check 2>&1)"; then
  echo "across_hosts.sh: no rig can be made here: ${reason#rig.sh: }" >&2
  exit "$EXIT_UNAVAILABLE"
fi

rig="bench-$$"
agent_hosts=()
for ((i = 1; i <= agent_host_count; ++i)); do agent_hosts+=("w$i"); done
remove_rig() {
  local status=$?
  "$rig_sh" down "$rig" >/dev/null 2>&1 || echo "across_hosts.sh: could not remove rig $rig" >&2
  exit "$status"
}
trap remove_rig EXIT
# --owner: a later 'up' or 'reap' removes it should this script be killed before its trap runs.
"$rig_sh" up --owner $$ "$rig" coord "${agent_hosts[@]}"
address="$("$rig_sh" address "$rig" coord)"
link="rig $rig: network namespaces of one machine, each host a veth pair to one Linux bridge (tests/hosts/rig.sh)"
hosts_csv="$(IFS=,; echo "${agent_hosts[*]}")"
echo "across_hosts.sh: wsync-bench on coord ($address), agents on $hosts_csv" >&2
# shellcheck disable=SC2086  # $curve: one word or none
"$rig_sh" exec "$rig" coord -- "$bench" bus --transport "tcp://$address:$port" $curve --agent-hosts "$hosts_csv" \
  --spawn-via "$rig_sh exec $rig {host} --" --link "$link" "$@"
