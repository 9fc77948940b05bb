#!/usr/bin/env bash
# Installs this build tree (stripped) into a temporary prefix, moves the prefix to another path, and checks there
# that every installed program finds each library inside the prefix, or on the system for the few the target system
# provides (glibc, the GPU driver, NCCL), and that every program runs. Fails when bundling or the RPATH breaks.
# Usage: relocatable_install.sh CMAKE BUILD_DIR CXX SYSTEM_LIBRARY_REGEX PROGRAM...
#   SYSTEM_LIBRARY_REGEX: names the target system provides (an ERE); PROGRAM: programs that must be installed.
set -euo pipefail

cmake=$1 build_dir=$2 cxx=$3 system_libraries=$4
shift 4
expected_programs=("$@")

work="$(mktemp -d "${TMPDIR:-/tmp}/wsync-install-test.XXXXXX")"
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

if ! "$cmake" --install "$build_dir" --prefix "$work/staged" --strip >"$work/install.log" 2>&1; then
  cat "$work/install.log" >&2
  echo "FAIL: cmake --install failed" >&2
  exit 1
fi
# Another path: anything in the prefix that still names where it was installed now points at nothing.
mkdir "$work/elsewhere"
mv "$work/staged" "$work/elsewhere/wsync"
prefix="$work/elsewhere/wsync"

for program in "${expected_programs[@]}"; do
  [[ -x "$prefix/bin/$program" ]] || fail "bin/$program was not installed"
done
shopt -s nullglob
programs=("$prefix"/bin/*)
bundled=("$prefix"/lib/*.so*)
((${#bundled[@]})) || fail "lib/ holds no bundled shared library"
for library in "${bundled[@]}"; do
  if [[ -L "$library" ]]; then fail "lib/$(basename "$library") is a symlink, not the real file"; fi
done

# (a) Where the loader finds each library of each program, as ldd reports it ("name => path (address)").
for program in "${programs[@]}"; do
  name_of_program="bin/$(basename "$program")"
  if ! ldd "$program" >"$work/ldd.txt" 2>&1; then
    cat "$work/ldd.txt" >&2
    fail "ldd $name_of_program failed"
    continue
  fi
  while read -r name arrow path _; do
    [[ "$arrow" == "=>" ]] || continue  # the vdso and the loader itself
    if [[ "$path" == "not" ]]; then
      # Only what the target system provides may be missing here (no GPU driver or NCCL on a build machine).
      [[ "$name" =~ $system_libraries ]] || fail "$name_of_program: $name not found"
    elif [[ -e "$prefix/lib/$name" ]]; then
      # ldd prints the RPATH as expanded: .../bin/../lib/NAME.
      [[ "$(realpath "$path")" == "$(realpath "$prefix/lib/$name")" ]] ||
        fail "$name_of_program: $name resolves to $path, not the bundled one"
    elif ! [[ "$name" =~ $system_libraries ]]; then
      fail "$name_of_program: $name resolves to $path outside the prefix: it was not bundled"
    fi
  done <"$work/ldd.txt"
done

# (b) Every program runs from the moved prefix.
for program in "${programs[@]}"; do
  if ! "$program" --help >"$work/help.txt" 2>&1; then
    cat "$work/help.txt" >&2
    fail "bin/$(basename "$program") --help failed"
  fi
done

# For embedding: the static libraries, and public headers that compile on their own (with the system's
# FlatBuffers, cppzmq, Boost and tl::expected headers, nothing from the source tree).
for part in bus coordinator trainer_agent worker_agent; do
  [[ -f "$prefix/lib/libwsync_$part.a" ]] || fail "lib/libwsync_$part.a was not installed"
done
headers=("$prefix"/include/wsync/*/*.hpp "$prefix"/include/wsync/schemas/control_generated.h)
printf '#include <%s>\n' "${headers[@]#"$prefix/include/"}" >"$work/all_headers.cpp"
if ! "$cxx" -std=c++20 -fsyntax-only -I "$prefix/include" "$work/all_headers.cpp" >"$work/cxx.log" 2>&1; then
  cat "$work/cxx.log" >&2
  fail "the installed headers do not compile on their own"
fi

if ((failures)); then
  echo "relocatable install: $failures failure(s)" >&2
  exit 1
fi
echo "relocatable install: ${#programs[@]} programs run from a moved prefix with ${#bundled[@]} bundled libraries" \
     "($(du -sh "$prefix" | cut -f1) stripped)"
