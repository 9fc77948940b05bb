#!/usr/bin/env python3
"""FSDP2 ranks publishing their shards (docs/regions.md) against the gather the field does first, in the same run:
examples/rl/fsdp2_to_dp.py with --publish shards and with --publish gathered (every rank DTensor.full_tensor(),
rank 0 publishes), alternating, on the same machine and devices. The figure is the update: from the end of a
training step to the version committed in every engine (the gather and the publish, or the shards' publish), and
the ratio gathered / shards. Writes a markdown report.

    python bench/python/fsdp2_shards.py --out bench/results/fsdp2-shards-DATE-MACHINE-COMMIT.md \\
        [--models tiny,qwen3-small] [--repeats 3] [--trainer-devices cpu,cpu] [--engine-devices cpu,cpu]

Needs torch >= 2.6 (FSDP2), the example's transformers, and wsync's library and programs (WSYNC_LIBRARY,
WSYNC_BIN_DIR, PYTHONPATH with python/), as the example does.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "rl" / "fsdp2_to_dp.py"
# One run of the example: two ranks, two engines, two versions on a small model.
RUN_TIMEOUT_S = 900


def run(model: str, publish: str, arguments) -> list[float]:
    """The update times (s) of every version of one run, or SystemExit naming the failed run."""
    with tempfile.TemporaryDirectory() as work:
        record = Path(work) / "record.json"
        command = [
            sys.executable, str(EXAMPLE), "--model", model, "--publish", publish, "--json", str(record),
            "--trainer-devices", arguments.trainer_devices, "--engine-devices", arguments.engine_devices,
            "--channel", arguments.channel,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        if done.returncode != 0:
            raise SystemExit(
                f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )
        timings = json.loads(record.read_text())["timings"]
        return [timings[key]["update_s"] for key in sorted(timings)]


def first_and_later(runs: list[list[float]]) -> tuple[float, float]:
    """The median first version (it carries the set-up: the rings, the declarations, the channel) and the median
    of the later ones (the steady state of an RL loop)."""
    return statistics.median(run[0] for run in runs), statistics.median(t for run in runs for t in run[1:])


def report_lines(rows, arguments, torch_version: str) -> list[str]:
    lines = [
        "# FSDP2 ranks publishing their shards vs gathering first (examples/rl/fsdp2_to_dp.py)",
        "",
        f"- date: {datetime.date.today()}; commit: {commit()}; machine: {platform.node()} ({os.cpu_count()} CPUs), "
        f"torch {torch_version}",
        f"- trainer devices {arguments.trainer_devices} (FSDP2, gloo on the CPU), engines {arguments.engine_devices}, "
        f"channel {arguments.channel}; {arguments.repeats} runs of each mode per model, alternating, 2 versions each",
        "- update: from a training step's end to the version committed in every engine (medians); the first "
        "version carries the set-up",
        "",
        "| model | shards, first / later (ms) | gathered, then rank 0 publishes, first / later (ms) | "
        "gathered / shards, later |",
        "|---|---|---|---|",
    ]
    for model, (shards_first, shards), (gathered_first, gathered) in rows:
        lines.append(
            f"| {model} | {shards_first * 1000:.1f} / {shards * 1000:.1f} | {gathered_first * 1000:.1f} / "
            f"{gathered * 1000:.1f} | {gathered / shards:.2f}x |"
        )
    return lines


def commit() -> str:
    if os.environ.get("WSYNC_COMMIT"):
        return os.environ["WSYNC_COMMIT"]
    try:
        return subprocess.check_output(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default="tiny,qwen3-small")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each mode per model, alternating")
    parser.add_argument("--trainer-devices", default="cpu,cpu")
    parser.add_argument("--engine-devices", default="cpu,cpu")
    parser.add_argument("--channel", default="shm")
    arguments = parser.parse_args()
    import torch

    rows = []
    for model in arguments.models.split(","):
        times: dict[str, list[list[float]]] = {"shards": [], "gathered": []}
        for _ in range(arguments.repeats):
            for publish in ("shards", "gathered"):  # alternating: drift on a shared machine hits both
                times[publish].append(run(model, publish, arguments))
                print(f"{model} {publish}: {[round(t * 1000, 1) for t in times[publish][-1]]} ms", flush=True)
        rows.append((model, first_and_later(times["shards"]), first_and_later(times["gathered"])))
    lines = report_lines(rows, arguments, torch.__version__)
    Path(arguments.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
