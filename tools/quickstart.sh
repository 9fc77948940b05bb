#!/usr/bin/env bash
# The README's first command: installs what is missing, builds everything into build/ and runs the demo.
# build/ is configured exactly as tools/test.sh configures it (test.sh --build-only does the work), so running the
# tests afterwards reuses this build instead of redoing it. Exits with the demo's exit code.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
cd "$REPO_ROOT"

# The demo: a short run of the bus benchmark.
readonly DEMO=(build/tools/bench/wsync-bench bus --quick)

case "${1:-}" in
  -h | --help)
    echo "Usage: tools/quickstart.sh"
    echo "Installs missing Debian packages, builds build/ and runs the demo: ${DEMO[*]}"
    exit 0 ;;
  "") ;;
  *) echo "quickstart: unknown option '$1' (try --help)" >&2; exit 2 ;;
esac

echo "quickstart: installing missing packages and building build/ (tools/test.sh --build-only)"
bash tools/test.sh --build-only

if [[ ! -x "${DEMO[0]}" ]]; then
  echo "quickstart: the demo ${DEMO[0]} was not built" >&2
  exit 1
fi
echo "quickstart: running the demo: ${DEMO[*]}"
set +e
"${DEMO[@]}"
rc=$?
set -e
echo "quickstart: the demo exited with $rc"
exit "$rc"
