#!/usr/bin/env bash
# rig.sh: several hosts on one machine, for tests of a bus whose agents run on hosts that do not share the
# coordinator's memory (docs/hosts-rig.md). Each host of a rig is a network namespace with one veth link to the rig's
# bridge and an IPv4 address in a subnet of the rig's own, a tmpfs of its own that becomes its /dev/shm, a runtime
# folder of its own (WSYNC_RUNTIME_DIR) and its own hostname. Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN),
# iproute2 and util-linux.
set -euo pipefail

# Where every rig keeps its state: one folder per rig, one per host inside it (its tmpfs and runtime folder).
readonly RIG_ROOT="${WSYNC_RIG_ROOT:-/run/wsync-rig}"
# Subnet slots 0..255 are taken by mkdir under here (atomic), so that rigs made at once get different subnets.
readonly SUBNET_SLOTS="$RIG_ROOT/.subnets"
# A rig's hosts live in 10.213.SLOT.0/24. No address of a rig is on the real host (its bridge has none), so these
# addresses never meet the machine's own routes; distinct subnets keep two rigs' traffic apart in captures and logs.
readonly SUBNET_PREFIX=10.213
readonly SUBNET_COUNT=256
# Host number M gets SUBNET_PREFIX.SLOT.M: .1 up to .MAX_HOSTS.
readonly MAX_HOSTS=200
# Each host's tmpfs (its /dev/shm) may hold this much: the payload arenas of a test's agents, with room to spare.
readonly SHM_SIZE=1g
# Interface names: the bridge is wsrigSLOT, host M's veth is wsrigSLOTpM on the bridge's side and eth0 inside its
# namespace (wsrigSLOTqM until it is moved there): at most 12 characters, within the kernel's 15.
readonly IFACE_PREFIX=wsrig
# Namespaces are named NS_PREFIX.RIG.HOST; neither name may hold a dot, so a rig's namespaces are found by prefix.
readonly NS_PREFIX=wsrig
# Exit codes: tests skip (naming the reason printed on stderr) on EXIT_UNAVAILABLE, the automake convention.
readonly EXIT_ERROR=1
readonly EXIT_USAGE=2
readonly EXIT_UNAVAILABLE=77

usage() {
  cat <<EOF
Usage: rig.sh COMMAND ...

  up [--owner PID] RIG HOST...   make rig RIG with these hosts (each: a network namespace on the rig's bridge, an
                                 address, its own /dev/shm, runtime folder and hostname); with --owner, the rig is
                                 removed by the next 'up' or 'reap' once process PID has ended
  exec RIG HOST -- CMD [ARG...]  run CMD on HOST (the process stays the same: signals to this pid reach CMD)
  address RIG HOST               print HOST's IPv4 address
  hosts RIG                      print every host of RIG with its address
  link RIG HOST down|up          cut or restore HOST's cable: its port on the bridge goes down or up. Nothing
                                 is reset: peers' packets are dropped silently, as with a pulled cable
  down RIG                       remove RIG: kill what still runs on its hosts, delete the namespaces, links and
                                 bridge, unmount the tmpfs, remove its folders (idempotent; fine on a half-made rig)
  reap                           'down' every rig whose --owner has ended
  check                          exit 0 if rigs can be made here, else $EXIT_UNAVAILABLE with the reason

RIG: 1-32 characters of [A-Za-z0-9_-]; HOST: 1-32 of [a-z0-9-], starting with a letter or digit.
State: $RIG_ROOT/RIG (set WSYNC_RIG_ROOT to move it). Exit codes: 0 done, $EXIT_ERROR failed, $EXIT_USAGE usage,
$EXIT_UNAVAILABLE rigs cannot be made here (not root, a tool missing, namespaces refused).
EOF
}

die() { echo "rig.sh: $*" >&2; exit "$EXIT_ERROR"; }
die_usage() { echo "rig.sh: $* (rig.sh --help: usage)" >&2; exit "$EXIT_USAGE"; }
unavailable() { echo "rig.sh: $*" >&2; exit "$EXIT_UNAVAILABLE"; }

check_rig_name() {
  [[ "$1" =~ ^[A-Za-z0-9_-]{1,32}$ ]] || die_usage "rig name '$1': use 1-32 characters of [A-Za-z0-9_-]"
}
check_host_name() {
  [[ "$1" =~ ^[a-z0-9][a-z0-9-]{0,31}$ ]] ||
    die_usage "host name '$1': use 1-32 characters of [a-z0-9-], starting with a letter or digit"
}

rig_dir() { echo "$RIG_ROOT/$1"; }
namespace_of() { echo "$NS_PREFIX.$1.$2"; }

# The reason rigs cannot be made here, or nothing.
unavailable_reason() {
  if ((EUID != 0)); then
    echo "needs root (network namespaces, veth links and tmpfs mounts); running as uid $EUID"
    return
  fi
  local tool
  for tool in ip unshare mount umount findmnt; do
    if ! command -v "$tool" >/dev/null; then
      echo "'$tool' is not installed (ip: Debian's iproute2; the others: util-linux)"
      return
    fi
  done
  local probe="$NS_PREFIX-probe-$$" output
  if ! output="$(ip netns add "$probe" 2>&1)"; then
    ip netns del "$probe" 2>/dev/null || true  # in case the name's file was made before the mount failed
    echo "cannot make a network namespace (ip netns add: ${output:-failed}); an unprivileged container?"
    return
  fi
  ip netns del "$probe" 2>/dev/null || true
  if ! output="$(unshare --mount --uts --propagation private true 2>&1)"; then
    echo "cannot make mount and UTS namespaces (unshare: ${output:-failed})"
    return
  fi
  if ! output="$(ip link add "${IFACE_PREFIX}x$$" type bridge 2>&1)"; then
    echo "cannot make a bridge (ip link add type bridge: ${output:-failed})"
    return
  fi
  ip link del "${IFACE_PREFIX}x$$" 2>/dev/null || true
}

# The subnet slot of RIG (empty when none was taken yet).
slot_of() {
  local file
  file="$(rig_dir "$1")/slot"
  [[ -f "$file" ]] && cat "$file"
  return 0
}

# Prints "HOST NUMBER" lines of RIG's hosts, in the order 'up' made them.
host_lines() {
  local file
  file="$(rig_dir "$1")/hosts"
  [[ -f "$file" ]] && cat "$file"
  return 0
}

host_number() {
  local rig="$1" host="$2" name number
  while read -r name number; do
    if [[ "$name" == "$host" ]]; then
      echo "$number"
      return 0
    fi
  done < <(host_lines "$rig")
  die "rig '$rig' has no host '$host' (hosts: $(host_lines "$rig" | cut -d' ' -f1 | tr '\n' ' '))"
}

require_rig() {
  [[ -f "$(rig_dir "$1")/slot" ]] || die "no rig '$1' (rig.sh up $1 HOST... makes it)"
}

host_address() {
  local rig="$1" host="$2"
  echo "$SUBNET_PREFIX.$(slot_of "$rig").$(host_number "$rig" "$host")"
}

# The start time of process PID (clock ticks since boot), which with the pid names one process even once the pid has
# been given to another; fails when PID has ended.
process_start() {
  local stat fields
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  # The fields after the command name, which may hold spaces and parentheses: the state (field 3) first.
  read -r -a fields <<<"${stat##*) }"
  # A zombie has ended too, though its pid stays taken until its parent (often init, slow to get to it) reaps it.
  [[ "${fields[0]}" != Z && "${fields[0]}" != X ]] || return 1
  echo "${fields[19]}"  # field 22
}

take_slot() {
  local rig="$1" slot
  mkdir -p "$SUBNET_SLOTS"
  for ((slot = 0; slot < SUBNET_COUNT; ++slot)); do
    if mkdir "$SUBNET_SLOTS/$slot" 2>/dev/null; then
      echo "$rig" >"$SUBNET_SLOTS/$slot/rig"
      echo "$slot"
      return 0
    fi
  done
  return 1
}

# The EXIT trap of a failing 'up': the half-made rig goes, the failure's status stays.
undo_up() {
  local status=$?
  trap - EXIT
  # ip's own codes (2 for most) would read as a usage error.
  ((status == EXIT_UNAVAILABLE)) || status=$EXIT_ERROR
  cmd_down "$1" >/dev/null 2>&1 || true
  exit "$status"
}

cmd_up() {
  local owner=""
  if [[ "${1:-}" == --owner ]]; then
    [[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || die_usage "--owner needs a PID"
    owner="$2"
    shift 2
  fi
  [[ $# -ge 2 ]] || die_usage "up needs a RIG and at least one HOST"
  local rig="$1"
  shift
  check_rig_name "$rig"
  local host seen=" "
  for host in "$@"; do
    check_host_name "$host"
    [[ "$seen" != *" $host "* ]] || die_usage "host '$host' named twice"
    seen+="$host "
  done
  (($# <= MAX_HOSTS)) || die_usage "at most $MAX_HOSTS hosts in a rig"
  local reason
  reason="$(unavailable_reason)"
  [[ -z "$reason" ]] || unavailable "$reason"

  cmd_reap
  local dir
  dir="$(rig_dir "$rig")"
  mkdir -p "$RIG_ROOT"
  chmod 0755 "$RIG_ROOT"
  mkdir "$dir" 2>/dev/null || die "rig '$rig' exists already ($dir); 'rig.sh down $rig' removes it"
  # From here on a failure leaves a half-made rig: take it down again before reporting.
  # shellcheck disable=SC2064  # the rig's name is fixed now (and holds no quote or space: checked above)
  trap "undo_up $rig" EXIT
  if [[ -n "$owner" ]]; then
    local started
    started="$(process_start "$owner")" || die "--owner $owner: no such process"
    echo "$owner $started" >"$dir/owner"
  fi
  local slot
  slot="$(take_slot "$rig")" || die "all $SUBNET_COUNT subnet slots are taken (rig.sh reap, or rig.sh down old rigs)"
  echo "$slot" >"$dir/slot"
  local bridge="$IFACE_PREFIX$slot"
  # A bridge left by a rig whose folder was removed by hand would hold this slot's name.
  ip link del "$bridge" 2>/dev/null || true
  ip link add "$bridge" type bridge
  ip link set "$bridge" up

  local number=0 ns outer inner address
  : >"$dir/hosts"
  {
    echo "127.0.0.1 localhost"
    for host in "$@"; do
      number=$((number + 1))
      echo "$SUBNET_PREFIX.$slot.$number $host"
    done
  } >"$dir/etc-hosts"
  number=0
  for host in "$@"; do
    number=$((number + 1))
    echo "$host $number" >>"$dir/hosts"
    ns="$(namespace_of "$rig" "$host")"
    outer="${IFACE_PREFIX}${slot}p$number"
    inner="${IFACE_PREFIX}${slot}q$number"
    address="$SUBNET_PREFIX.$slot.$number"
    ip netns add "$ns" || die "cannot make network namespace $ns for host $host"
    ip link add "$outer" type veth peer name "$inner"
    ip link set "$inner" netns "$ns"
    ip -n "$ns" link set "$inner" name eth0
    ip -n "$ns" addr add "$address/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip link set "$outer" master "$bridge"
    ip link set "$outer" up
    # A tmpfs of its own, not a folder: another host's shared-memory segments must not be reachable at all.
    mkdir -p "$dir/$host/shm" "$dir/$host/runtime"
    chmod 0700 "$dir/$host/runtime"
    mount -t tmpfs -o "size=$SHM_SIZE,mode=1777,nosuid,nodev" "wsrig-$rig-$host" "$dir/$host/shm"
  done
  trap - EXIT
}

# Runs inside the host's namespaces (cmd_exec's last step before the program): what only a process in them can do.
cmd_enter() {
  local rig="$1" host="$2"
  shift 2
  [[ "${1:-}" == -- ]] && shift
  local dir
  dir="$(rig_dir "$rig")"
  # In this mount namespace only (private propagation): the real host's /dev/shm and /etc/hosts are untouched.
  mount --bind "$dir/$host/shm" /dev/shm
  mount --bind "$dir/etc-hosts" /etc/hosts
  echo "$host" >/proc/sys/kernel/hostname
  export WSYNC_RUNTIME_DIR="$dir/$host/runtime"
  export HOSTNAME="$host"
  exec "$@"
}

cmd_exec() {
  [[ $# -ge 4 && "$3" == -- ]] || die_usage "exec needs RIG HOST -- CMD [ARG...]"
  local rig="$1" host="$2"
  shift 3
  check_rig_name "$rig"
  check_host_name "$host"
  require_rig "$rig"
  host_number "$rig" "$host" >/dev/null
  local self
  self="$(readlink -f "${BASH_SOURCE[0]}")"
  # Every step execs the next, none forks (ip netns exec without -all, unshare without --fork), so the pid the
  # caller holds is the program's at the end, and its signals reach the program.
  exec ip netns exec "$(namespace_of "$rig" "$host")" \
    unshare --mount --uts --propagation private -- "$BASH" "$self" _enter "$rig" "$host" -- "$@"
}

cmd_link() {
  [[ $# -eq 3 ]] || die_usage "link needs RIG HOST down|up"
  local rig="$1" host="$2" state="$3"
  [[ "$state" == down || "$state" == up ]] || die_usage "link state '$state': use down or up"
  require_rig "$rig"
  # The bridge's side only: inside the namespace the interface keeps its address and routes and merely loses its
  # carrier, so the host's sockets see no error and its peers no reset; packets are dropped both ways.
  ip link set "${IFACE_PREFIX}$(slot_of "$rig")p$(host_number "$rig" "$host")" "$state"
}

cmd_down() {
  [[ $# -eq 1 ]] || die_usage "down needs RIG"
  local rig="$1"
  check_rig_name "$rig"
  local dir ns slot pids target
  dir="$(rig_dir "$rig")"
  slot="$(slot_of "$rig")"
  # Every namespace of the rig, whether or not the hosts file got to name it.
  while read -r ns _; do
    [[ "$ns" == "$NS_PREFIX.$rig."* ]] || continue
    # A namespace outlives its name while processes run in it: they are the rig's, so they go first.
    pids="$(ip netns pids "$ns" 2>/dev/null || true)"
    if [[ -n "$pids" ]]; then
      # shellcheck disable=SC2086
      kill -KILL $pids 2>/dev/null || true
    fi
    ip netns del "$ns" 2>/dev/null || true
  done < <(ip netns list 2>/dev/null)
  if [[ -n "$slot" ]]; then
    # Deleting a namespace deletes its end of each veth, and with it the other end; these are what is left.
    local link
    while read -r link; do
      ip link del "$link" 2>/dev/null || true
    done < <(ip -o link show 2>/dev/null | sed -n "s/^[0-9]*: \(${IFACE_PREFIX}${slot}p[0-9]*\)[@:].*/\1/p")
    ip link del "$IFACE_PREFIX$slot" 2>/dev/null || true
    if [[ "$(cat "$SUBNET_SLOTS/$slot/rig" 2>/dev/null)" == "$rig" ]]; then
      rm -rf "${SUBNET_SLOTS:?}/$slot"
    fi
  fi
  if [[ -d "$dir" ]]; then
    # Deepest first; lazily if something still has a file open in one (the kernel frees it when that ends).
    while read -r target; do
      umount "$target" 2>/dev/null || umount --lazy "$target" 2>/dev/null || true
    done < <(findmnt -rn -o TARGET 2>/dev/null | grep -F "$dir/" | sort -r)
    if findmnt -rn -o TARGET 2>/dev/null | grep -qF "$dir/"; then
      die "rig '$rig': cannot unmount $(findmnt -rn -o TARGET | grep -F "$dir/" | tr '\n' ' ')"
    fi
    rm -rf "$dir"
  fi
}

cmd_reap() {
  local dir rig pid started
  [[ -d "$RIG_ROOT" ]] || return 0
  for dir in "$RIG_ROOT"/*/; do
    [[ -f "$dir/owner" ]] || continue
    rig="$(basename "$dir")"
    read -r pid started <"$dir/owner" || continue
    if [[ "$(process_start "$pid" 2>/dev/null || true)" != "$started" ]]; then
      echo "rig.sh: removing rig '$rig': its owner (pid $pid) has ended" >&2
      # In a subshell: another 'up' may be reaping the same rig, and a failure here must not end this command.
      (cmd_down "$rig") || true
    fi
  done
}

main() {
  if [[ $# -eq 0 ]]; then
    usage >&2
    exit "$EXIT_USAGE"
  fi
  local command="$1"
  shift
  case "$command" in
    up) cmd_up "$@" ;;
    exec) cmd_exec "$@" ;;
    _enter) cmd_enter "$@" ;;
    address)
      [[ $# -eq 2 ]] || die_usage "address needs RIG HOST"
      require_rig "$1"
      host_address "$1" "$2"
      ;;
    hosts)
      [[ $# -eq 1 ]] || die_usage "hosts needs RIG"
      require_rig "$1"
      local host _
      while read -r host _; do echo "$host $(host_address "$1" "$host")"; done < <(host_lines "$1")
      ;;
    link) cmd_link "$@" ;;
    down) cmd_down "$@" ;;
    reap) [[ $# -eq 0 ]] || die_usage "reap takes no arguments"; cmd_reap ;;
    check)
      local reason
      reason="$(unavailable_reason)"
      [[ -z "$reason" ]] || unavailable "$reason"
      ;;
    -h | --help | help) usage ;;
    *) die_usage "unknown command '$command'" ;;
  esac
}

main "$@"
