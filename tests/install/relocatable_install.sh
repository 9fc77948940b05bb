#!/usr/bin/env bash
# Installs this build tree (stripped) into a temporary prefix, moves the prefix to another path, and checks there
# that every installed program and libwsync.so find each library inside the prefix, or on the system for the few
# the target system provides (glibc, the GPU driver, NCCL), that every program runs, and that a C program built
# against the installed wsync.h runs on the installed libwsync.so. Then the same for the python component (what the
# Python package ships), whose libwsync.so must leave libstdc++ and libgcc_s to the system. Fails when bundling or
# the RPATH breaks.
# Usage: relocatable_install.sh CMAKE BUILD_DIR CXX CC SYSTEM_LIBRARY_REGEX PROGRAM...
#   SYSTEM_LIBRARY_REGEX: names the target system provides (an ERE); PROGRAM: programs that must be installed.
set -euo pipefail

cmake=$1 build_dir=$2 cxx=$3 cc=$4 system_libraries=$5
shift 5
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
  # The one symlink: libwsync.so, the name a linker looks for, to libwsync.so.ABI.
  if [[ -L "$library" && ! ("$(basename "$library")" == libwsync.so && -f "$library") ]]; then
    fail "lib/$(basename "$library") is a symlink, not the real file"
  fi
done
[[ -f "$prefix/lib/libwsync.so" && -f "$prefix/include/wsync/wsync.h" ]] || fail "libwsync.so or wsync.h not installed"

# (a) Where the loader finds each library of each program and of libwsync.so, as ldd reports it ("name => path
# (address)"). check_libraries FILE LIBDIR SYSTEM_REGEX.
check_libraries() {
  local file=$1 libdir=$2 system=$3 shown name arrow path _
  shown="${file#"$work/elsewhere/"}"
  if ! ldd "$file" >"$work/ldd.txt" 2>&1; then
    cat "$work/ldd.txt" >&2
    fail "ldd $shown failed"
    return
  fi
  while read -r name arrow path _; do
    [[ "$arrow" == "=>" ]] || continue  # the vdso and the loader itself
    if [[ "$path" == "not" ]]; then
      # Only what the target system provides may be missing here (no GPU driver or NCCL on a build machine).
      [[ "$name" =~ $system ]] || fail "$shown: $name not found"
    elif [[ -e "$libdir/$name" ]]; then
      # ldd prints the RPATH as expanded: .../bin/../lib/NAME.
      [[ "$(realpath "$path")" == "$(realpath "$libdir/$name")" ]] ||
        fail "$shown: $name resolves to $path, not the bundled one"
    elif ! [[ "$name" =~ $system ]]; then
      fail "$shown: $name resolves to $path outside the prefix: it was not bundled"
    fi
  done <"$work/ldd.txt"
}
for file in "${programs[@]}" "$prefix/lib/libwsync.so"; do
  check_libraries "$file" "$prefix/lib" "$system_libraries"
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

# The C API: a C program built against the installed header and library (found through the program's RPATH, its
# own dependencies through libwsync.so's $ORIGIN), which starts a coordinator and reads its committed version.
cat >"$work/capi.c" <<'EOF'
#include <stdio.h>
#include <wsync/wsync.h>

int main(int argc, char** argv) {
  wsync_coordinator_config config;
  wsync_coordinator* coordinator = NULL;
  wsync_status status;
  if (argc != 2 || wsync_abi_version() != WSYNC_ABI_VERSION) return 2;
  wsync_coordinator_config_init(&config);
  config.bus = argv[1];
  status = wsync_coordinator_start(&config, &coordinator);
  if (status != WSYNC_OK) return fprintf(stderr, "%s: %s\n", wsync_status_name(status), wsync_last_error()), 1;
  status = wsync_coordinator_committed_version(coordinator) == 0 ? WSYNC_OK : WSYNC_INTERNAL;
  wsync_coordinator_destroy(coordinator);
  printf("libwsync %s\n", wsync_version());
  return status;
}
EOF
mkdir -m 700 "$work/run"
# In a sanitizer build libwsync.so needs the ASan runtime loaded before anything else: a process that is not itself
# instrumented (this C program, python3) gets it preloaded, as it would have to in real use of such a build.
preload=""
if readelf -d "$prefix/lib/libwsync.so" | grep -q 'NEEDED.*libasan'; then
  preload="$("$cxx" -print-file-name=libasan.so)"
fi
if ! "$cc" -std=c11 -Wall -Wextra -Werror -pedantic -I "$prefix/include" "$work/capi.c" -L "$prefix/lib" -lwsync \
       -Wl,-rpath,"$prefix/lib" -o "$work/capi" >"$work/cc.log" 2>&1; then
  cat "$work/cc.log" >&2
  fail "a C program does not build against the installed wsync.h and libwsync.so"
elif ! WSYNC_RUNTIME_DIR="$work/run" LD_PRELOAD="$preload" "$work/capi" "install-test-$$" >"$work/capi.log" 2>&1; then
  cat "$work/capi.log" >&2
  fail "a C program on the installed libwsync.so failed"
fi

# The python component, moved too: libwsync.so (one real file) and wsync-coordinator, bundled but for libstdc++ and
# libgcc_s, which the Python process's own must serve.
if ! "$cmake" --install "$build_dir" --component python --prefix "$work/python-staged" --strip \
       >"$work/install-python.log" 2>&1; then
  cat "$work/install-python.log" >&2
  fail "cmake --install --component python failed"
else
  mv "$work/python-staged" "$work/elsewhere/python"
  native="$(find "$work/elsewhere/python" -type d -name _native)"
  [[ -d "$native/lib" && -d "$native/bin" ]] || fail "the python component has no single _native folder: $native"
  [[ -f "$native/lib/libwsync.so" && ! -L "$native/lib/libwsync.so" ]] ||
    fail "python component: lib/libwsync.so is not a real file"
  for library in "$native"/lib/*; do
    if [[ "$(basename "$library")" =~ ^lib(stdc\+\+|gcc_s)\.so ]]; then
      fail "python component: $(basename "$library") is bundled"
    fi
  done
  for file in "$native/bin/wsync-coordinator" "$native/lib/libwsync.so"; do
    check_libraries "$file" "$native/lib" "$system_libraries|^libstdc\+\+\.so|^libgcc_s\.so"
  done
  "$native/bin/wsync-coordinator" --help >/dev/null 2>&1 || fail "python component: wsync-coordinator --help failed"
  if [[ -x /usr/bin/python3 ]] &&
     ! LD_PRELOAD="$preload" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
       /usr/bin/python3 -c "import ctypes, sys; sys.exit(ctypes.CDLL(sys.argv[1]).wsync_abi_version() < 1)" \
       "$native/lib/libwsync.so" >"$work/python.log" 2>&1; then
    cat "$work/python.log" >&2
    fail "python component: /usr/bin/python3 cannot load libwsync.so through ctypes"
  fi
fi

if ((failures)); then
  echo "relocatable install: $failures failure(s)" >&2
  exit 1
fi
echo "relocatable install: ${#programs[@]} programs and libwsync.so run from a moved prefix with ${#bundled[@]}" \
     "libraries in lib/ ($(du -sh "$prefix" | cut -f1) stripped); the python component runs from its own folder"
