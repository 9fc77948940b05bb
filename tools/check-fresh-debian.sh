#!/usr/bin/env bash
# Proves that CI's entry point (.ci/run) or the quickstart works on a truly fresh Debian 12: a minimal bookworm root
# made once with debootstrap is copied for every run, the committed HEAD is cloned into the copy (like CI's fresh
# clone) and the script runs there as root under chroot, with CI=true, a clean environment and no stdin.
# Needs root (debootstrap, mount, chroot), about 2 GB under the cache folder, and the host's Debian mirror.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly SUITE=bookworm
# Inside the root; the same path for every run so that build logs compare.
readonly SRC_IN_ROOT=/src/wsync

usage() {
  cat <<EOF
Usage: tools/check-fresh-debian.sh [options] [-- args for the script]

Runs 'bash .ci/run' (or the quickstart) in a throw-away copy of a pristine minimal Debian 12 root, on a fresh
clone of the repository's committed HEAD. Reports the exit code and the elapsed time.

Options:
  --quickstart          run tools/quickstart.sh instead of .ci/run
  --cache DIR           where the pristine root, the runs and the logs live
                        (default: \$WSYNC_FRESH_DEBIAN_DIR or /var/tmp/wsync-fresh-debian)
  --mirror URL          Debian mirror (default: the one this host's apt sources use)
  --rebuild             throw the pristine root away and debootstrap it again
  --prepare-only        make the pristine root if needed, run nothing
  --with-worktree PATH  copy PATH (relative to the repository root) from the working tree into the clone,
                        over the committed version; repeatable; for trying uncommitted files
  --keep                keep the run's root afterwards (it is deleted by default)
  --no-cuda             leave out this host's CUDA Toolkit (by default /usr/local/cuda is bound into the root,
                        read-only, because CI's machine has it: the GPU channels and their tests are then built)
  -h, --help            this text

Everything after '--' is passed to the script, e.g. '-- --no-sanitizers -L unit'.
EOF
}

log() { printf '[check-fresh-debian] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 2; }

cache_dir="${WSYNC_FRESH_DEBIAN_DIR:-/var/tmp/wsync-fresh-debian}"
mirror=""
entry=ci
rebuild=0
prepare_only=0
keep=0
cuda=1
worktree_paths=()
script_args=()
while (($#)); do
  case "$1" in
    --quickstart) entry=quickstart ;;
    --cache) cache_dir="${2:?--cache needs a folder}"; shift ;;
    --cache=*) cache_dir="${1#*=}" ;;
    --mirror) mirror="${2:?--mirror needs a URL}"; shift ;;
    --mirror=*) mirror="${1#*=}" ;;
    --rebuild) rebuild=1 ;;
    --prepare-only) prepare_only=1 ;;
    --with-worktree) worktree_paths+=("${2:?--with-worktree needs a path}"); shift ;;
    --with-worktree=*) worktree_paths+=("${1#*=}") ;;
    --keep) keep=1 ;;
    --no-cuda) cuda=0 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; script_args=("$@"); break ;;
    *) usage >&2; die "unknown option '$1'" ;;
  esac
  shift
done

((EUID == 0)) || die "needs root for debootstrap, mount and chroot: sudo $0 ..."
case "$cache_dir" in
  "$REPO_ROOT" | "$REPO_ROOT"/*) die "the cache folder must be outside the repository: $cache_dir" ;;
esac
mkdir -p "$cache_dir"
cache_dir="$(cd "$cache_dir" && pwd)"
readonly pristine="$cache_dir/pristine"

# Prints "URI SUITE" for every Debian bookworm entry of this host's apt sources (one-line and deb822 formats).
host_debian_sources() {
  local file
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$file" ]] || continue
    # deb [options] URI SUITE COMPONENTS...
    sed -E 's/#.*//; s/\[[^]]*\]//' "$file" | awk '$1 == "deb" { print $2, $3 }'
  done
  for file in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$file" ]] || continue
    awk '
      function flush(  i, j, u, s) {
        if (enabled && types ~ /(^| )deb( |$)/) {
          nu = split(uris, u, " "); ns = split(suites, s, " ")
          for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++) print u[i], s[j]
        }
        types = uris = suites = ""; enabled = 1
      }
      BEGIN { enabled = 1 }
      /^[[:space:]]*#/ { next }
      /^[[:space:]]*$/ { flush(); next }
      { key = tolower($1); sub(/:$/, "", key); $1 = "" ; sub(/^ +/, "") }
      key == "types" { types = $0 } key == "uris" { uris = $0 } key == "suites" { suites = $0 }
      key == "enabled" && tolower($0) == "no" { enabled = 0 }
      END { flush() }' "$file"
  done | awk -v suite="$SUITE" '$2 == suite || index($2, suite "-") == 1 || index($2, suite "/") == 1' | sort -u
}

sources_lines="$(host_debian_sources)"
if [[ -z "$mirror" ]]; then
  mirror="$(awk -v suite="$SUITE" '$2 == suite { print $1; exit }' <<<"$sources_lines")"
  [[ -n "$mirror" ]] || die "no '$SUITE' entry in this host's apt sources; pass --mirror URL"
fi

make_pristine() {
  command -v debootstrap >/dev/null || {
    log "installing debootstrap on this host"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap >/dev/null
  }
  local staging="$cache_dir/pristine.staging" started=$SECONDS
  rm -rf --one-file-system "$staging" "$pristine"
  log "debootstrap --variant=minbase $SUITE from $mirror (once; cached in $pristine)"
  debootstrap --variant=minbase "$SUITE" "$staging" "$mirror" >"$cache_dir/debootstrap.log" 2>&1 ||
    die "debootstrap failed; see $cache_dir/debootstrap.log"
  # The same apt sources as this host (only its Debian entries), so that updates and security come from there too.
  local uri suite
  : >"$staging/etc/apt/sources.list"
  while read -r uri suite; do
    [[ -n "$uri" ]] && printf 'deb %s %s main\n' "$uri" "$suite" >>"$staging/etc/apt/sources.list"
  done <<<"$sources_lines"
  if [[ ! -s "$staging/etc/apt/sources.list" ]]; then
    printf 'deb %s %s main\n' "$mirror" "$SUITE" >"$staging/etc/apt/sources.list"
  fi
  # Leave no package lists behind: a fresh machine has to run apt-get update itself.
  rm -rf "$staging"/var/lib/apt/lists/* "$staging"/var/cache/apt/archives/*.deb
  mv "$staging" "$pristine"
  echo "$((SECONDS - started))" >"$cache_dir/debootstrap.seconds"
  log "pristine root ready in $((SECONDS - started)) s"
}

exec 9>"$cache_dir/.lock"
flock 9
if ((rebuild)) || [[ ! -x "$pristine/bin/bash" ]]; then
  make_pristine
else
  log "reusing pristine root $pristine (made in $(cat "$cache_dir/debootstrap.seconds" 2>/dev/null || echo '?') s)"
fi
flock -u 9
((prepare_only)) && exit 0

mkdir -p "$cache_dir/runs" "$cache_dir/logs"
run_root="$(mktemp -d "$cache_dir/runs/run-$(date +%Y%m%d-%H%M%S)-XXXX")"
log_file="$cache_dir/logs/$(basename "$run_root").log"
mounted=()

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  local rc=$? proc i
  # Processes left in the root (tests that leaked children) would keep the mounts busy; they are ours to end.
  for proc in /proc/[0-9]*; do
    if [[ "$(readlink "$proc/root" 2>/dev/null)" == "$run_root" ]]; then
      kill -KILL "${proc#/proc/}" 2>/dev/null || true
    fi
  done
  # Mounts the tests made under the root (ip netns binds /run/netns and each namespace's file), deepest first.
  local extra
  while read -r extra; do
    umount -l "$extra" 2>/dev/null || true
  done < <(awk -v root="$run_root/" 'index($5, root) == 1 {print $5}' /proc/self/mountinfo | sort -r)
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    mountpoint -q "${mounted[i]}" || continue
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" || log "could not unmount ${mounted[i]}"
  done
  # What the fuzzers found would otherwise go with the root.
  local artifacts="$run_root$SRC_IN_ROOT/build-fuzz/fuzz-artifacts"
  if [[ -d "$artifacts" ]] && [[ -n "$(find "$artifacts" -type f -print -quit)" ]]; then
    cp -a "$artifacts" "${log_file%.log}.fuzz-artifacts"
    log "fuzz artifacts saved in ${log_file%.log}.fuzz-artifacts"
  fi
  if grep -qF " $run_root/" /proc/self/mountinfo; then
    log "something is still mounted under $run_root; leaving it in place"
  elif ((keep)); then
    log "kept the root: $run_root (chroot $run_root bash)"
  else
    rm -rf --one-file-system "$run_root"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mount_in_root() { # mount_in_root TARGET MOUNT-ARGS...
  local target="$run_root$1"; shift
  mkdir -p "$target"
  mount "$@" "$target"
  mounted+=("$target")
}

started=$SECONDS
log "copying the pristine root to $run_root"
cp -a --reflink=auto "$pristine/." "$run_root/"
cp -L /etc/resolv.conf "$run_root/etc/resolv.conf"
# A machine's /etc/hosts, which debootstrap does not write and every installed Debian has: the host rig binds its
# own names over it (tests/hosts/rig.sh), and a bind needs the file to exist.
cp -L /etc/hosts "$run_root/etc/hosts"
# The host's TLS trust and pip's configuration of it, copied like resolv.conf: where this host reaches PyPI through
# an egress proxy with a CA of its own, CI's machine (set up like this one) does too, and the root must as well. The
# local CA folder too, so that installing ca-certificates in the root regenerates a bundle that still holds it.
for trust in /etc/ssl/certs/ca-certificates.crt /etc/pip.conf /usr/local/share/ca-certificates; do
  if [[ -e "$trust" ]]; then
    mkdir -p "$(dirname "$run_root$trust")"
    cp -rL "$trust" "$(dirname "$run_root$trust")/"
  fi
done

head_commit="$(git -C "$REPO_ROOT" rev-parse HEAD)"
log "cloning committed HEAD $(git -C "$REPO_ROOT" log -1 --format='%h %s' HEAD)"
git clone --quiet --no-hardlinks "$REPO_ROOT" "$run_root$SRC_IN_ROOT"
git -C "$run_root$SRC_IN_ROOT" checkout --quiet "$head_commit"
for path in "${worktree_paths[@]}"; do
  [[ -e "$REPO_ROOT/$path" ]] || die "--with-worktree: no $path in the working tree"
  log "overlaying uncommitted working-tree path: $path"
  mkdir -p "$(dirname "$run_root$SRC_IN_ROOT/$path")"
  cp -a "$REPO_ROOT/$path" "$(dirname "$run_root$SRC_IN_ROOT/$path")/"
done

# The root a mount point of its own, as a machine's / is: without it, `unshare --mount` (the host rig's way into a
# "host", tests/hosts/rig.sh) cannot make / private and the rig's tests skip.
mount_in_root / --bind "$run_root"
mount_in_root /proc -t proc proc
mount_in_root /sys -t sysfs -o ro sysfs
mount_in_root /dev --bind /dev
mount_in_root /dev/pts --bind /dev/pts
# Shared-memory segments of the tests must not meet the host's.
mount_in_root /dev/shm -t tmpfs -o mode=1777,nosuid,nodev tmpfs
# CI's machine has the CUDA Toolkit (with NCCL) under /usr/local/cuda, installed by hand rather than by our scripts:
# without it here the CUDA build, which CI compiles and tests (GPU tests skipping), would go unchecked.
if ((cuda)) && [[ -d /usr/local/cuda/ ]]; then
  cuda_dir="$(readlink -f /usr/local/cuda)"
  log "binding this host's CUDA Toolkit into the root, read-only: $cuda_dir"
  mount_in_root "$cuda_dir" --bind -o ro "$cuda_dir"
  [[ "$cuda_dir" == /usr/local/cuda ]] || ln -sfn "$cuda_dir" "$run_root/usr/local/cuda"
fi

if [[ "$entry" == quickstart ]]; then
  command=(bash tools/quickstart.sh "${script_args[@]}")
else
  command=(bash .ci/run "${script_args[@]}")
fi
log "running '${command[*]}' in the fresh root as root, CI=true, log: $log_file"
run_started=$SECONDS
set +e
# shellcheck disable=SC2016 # $1 and $@ belong to the shell inside the root
chroot "$run_root" /usr/bin/env -i \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM="${TERM:-dumb}" CI=true \
  /bin/bash -c 'cd "$1" && shift && exec "$@"' bash "$SRC_IN_ROOT" "${command[@]}" </dev/null 2>&1 | tee "$log_file"
rc=${PIPESTATUS[0]}
set -e
log "exit code $rc; '${command[*]}' took $((SECONDS - run_started)) s, $((SECONDS - started)) s in all"
exit "$rc"
