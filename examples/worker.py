#!/usr/bin/env python3
"""An inference worker: generate, take each version the trainer publishes, tag outputs with their versions. Its
weights start other than the trainer's: only wsync makes them equal, in place.

python examples/worker.py demo 3 w0     # agent w0, until it holds version 3 (see trainer.py)
"""

from __future__ import annotations

import sys
import threading
import time

import torch

import wsync

bus, last_version, agent_id = sys.argv[1], int(sys.argv[2]), sys.argv[3]
policy = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 16)).requires_grad_(False)
steps = threading.Lock()  # held by each decode step, and by the worker from its pause to its resume


def pause(mode: str, round_: int) -> None:  # returns between two steps: nothing reads the weights then
    steps.acquire()


def resume(version: int) -> None:
    steps.release()


with wsync.Worker(bus, agent_id, tensors=policy.named_parameters(), on_pause=pause, on_resume=resume) as worker:
    worker.wait_for_version(1, timeout=60)  # nothing to serve before the first version
    while worker.applied_version < last_version:
        spans, state = wsync.SpanRecorder(), torch.zeros(1, 16)  # one output: (first token, version) spans
        for token in range(8):
            with steps:  # "keep" pauses: an output in flight goes on under the new version
                spans.record(token, worker.applied_version)
                state = policy(state)  # one decode step
            time.sleep(0.01)
        print(f"output spans {spans.spans}", flush=True)
    checksum = sum(p.double().sum().item() for p in policy.parameters())
    print(f"holds version {worker.applied_version}, checksum {checksum:.6f}", flush=True)
