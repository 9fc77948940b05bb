#!/usr/bin/env bash
# The README's first command: installs what is missing, builds the demo's programs into build/ and runs the demo.
# build/ is configured exactly as tools/test.sh configures it (test.sh --build-only --target wsync-demo does the
# work: the demo and the coordinator, trainer and worker it starts, not the tests), so the test command afterwards
# builds only the rest. Each step's time is printed as it ends; exits with the demo's exit code.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
cd "$REPO_ROOT"

# The demo: a coordinator, 1 trainer and 3 workers as processes; 20 rounds of opt-125m in pause mode keep while the
# workers generate; verified at the end (tools/demo/main.cpp). Extra arguments go to it (try --help).
DEMO=(build/tools/demo/wsync-demo --workers 3 --rounds 20 --model opt-125m --pause-mode keep)

case "${1:-}" in
  -h | --help)
    echo "Usage: tools/quickstart.sh [DEMO OPTIONS]"
    echo "Installs missing Debian packages, builds build/ and runs the demo: ${DEMO[*]}"
    echo "DEMO OPTIONS override those (e.g. --rounds 5 --workers 8); see build/tools/demo/wsync-demo --help"
    exit 0 ;;
esac
DEMO+=("$@")
readonly DEMO

echo "quickstart: installing missing packages and building the demo in build/ (tools/test.sh --build-only)"
bash tools/test.sh --build-only --target wsync-demo

if [[ ! -x "${DEMO[0]}" ]]; then
  echo "quickstart: the demo ${DEMO[0]} was not built" >&2
  exit 1
fi
echo "quickstart: running the demo: ${DEMO[*]}"
demo_started=$SECONDS
set +e
"${DEMO[@]}"
rc=$?
set -e
echo "quickstart: the demo exited with $rc after $((SECONDS - demo_started)) s (${SECONDS} s in all)"
exit "$rc"
