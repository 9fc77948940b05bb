#!/usr/bin/env python3
"""The cost of the publish call itself at many tensors: `wsync_trainer_publish` given the manifest's tensor array
(each description checked against the manifest) against WSYNC_PUBLISH_SAME_TENSORS (the memory of the last accepted
publish again, nothing per tensor), taking turns in the same run, over shm with numpy arrays (no GPU needed). This is
the host work between Python's `publish()` call and the agent's start of the round, which the round's own outcome
timings do not include.

    python bench/python/publish_call.py --tensors 100000 --rounds 20 [--out FILE.md]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import wsync
from wsync import _native as N
from wsync.outcome import OutcomeKind

# A round's outcome is awaited in slices of this many milliseconds (any slice works; Ctrl-C between them).
WAIT_SLICE_MS = 100
# No round of a few MB over shm takes this long unless something is wrong.
ROUND_TIMEOUT_SECONDS = 120


def publish_and_wait(trainer: wsync.Trainer, version: int, same: bool) -> float:
    """One round through the C calls; the milliseconds wsync_trainer_publish took."""
    lib, handle, manifest = trainer._lib, trainer._handle, trainer._manifest
    options = N.PublishOptions()
    lib.wsync_publish_options_init(ctypes.byref(options))
    options.flags = N.PUBLISH_SAME_TENSORS if same else 0
    started = time.perf_counter()
    if same:
        status = lib.wsync_trainer_publish(handle, version, None, 0, ctypes.byref(options))
    else:
        status = lib.wsync_trainer_publish(handle, version, manifest.pointer(), manifest.count, ctypes.byref(options))
    called = time.perf_counter()
    if status != N.OK:
        raise N.error(status)
    outcome = N.OutcomeStruct()
    outcome.struct_size = ctypes.sizeof(outcome)
    deadline = time.monotonic() + ROUND_TIMEOUT_SECONDS
    while lib.wsync_trainer_wait(handle, WAIT_SLICE_MS, ctypes.byref(outcome)) != N.OK:
        if time.monotonic() > deadline:
            raise TimeoutError(f"version {version}: no outcome in {ROUND_TIMEOUT_SECONDS} s")
    if N.OUTCOME_KINDS.get(outcome.kind) is not OutcomeKind.COMMITTED:
        raise RuntimeError(f"version {version} did not commit: {N.text(outcome.detail)}")
    return (called - started) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tensors", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds per path (after 2 warm-up each)")
    parser.add_argument("--commit", default="")
    parser.add_argument("--out")
    args = parser.parse_args()
    # Names as long as a MoE checkpoint's (model.layers.L.mlp.experts.E.w), 16 bytes each: the call's cost is per
    # tensor, not per byte.
    tensors = [
        (f"model.layers.{i // 1000}.mlp.experts.{i % 1000}.w", np.full(16, i % 251, np.uint8))
        for i in range(args.tensors)
    ]
    targets = {name: np.zeros_like(array) for name, array in tensors}
    bus = f"publish-call-{os.getpid()}"
    times = {False: [], True: []}
    with (
        wsync.Coordinator(bus, log_level="warn"),
        wsync.Worker(bus, agent_id="w0", tensors=targets, registration_timeout=120),
        wsync.Trainer(bus, agent_id="t0") as trainer,
    ):
        version = trainer.committed_version + 1
        trainer.publish(version, tensors).wait(ROUND_TIMEOUT_SECONDS)  # declares the manifest
        trainer._in_flight = None  # the rounds below go through the C calls directly
        for number in range(2 * (2 + args.rounds)):
            version += 1
            same = number % 2 == 1  # taking turns, so that machine noise hits both alike
            took = publish_and_wait(trainer, version, same)
            if number >= 4:
                times[same].append(took)
    checked, same = statistics.median(times[False]), statistics.median(times[True])
    lines = [
        f"# wsync_trainer_publish at {args.tensors:,} tensors ({time.strftime('%Y-%m-%d')}"
        f"{', commit ' + args.commit if args.commit else ''})",
        "",
        f"Machine: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; shm, numpy arrays of "
        f"16 bytes; {args.rounds} timed rounds per path, taking turns; the call alone (its round awaited untimed).",
        "",
        "| path | median ms | min-max ms |",
        "|---|---:|---:|",
        f"| tensor array given, each description checked | {checked:.2f} | "
        f"{min(times[False]):.2f}-{max(times[False]):.2f} |",
        f"| WSYNC_PUBLISH_SAME_TENSORS | {same:.2f} | {min(times[True]):.2f}-{max(times[True]):.2f} |",
        "",
        f"same / checked: {same / checked:.3f}x",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
