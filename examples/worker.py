#!/usr/bin/env python3
"""An inference worker: generate with the weights it holds, take every version the trainer publishes (paused
between two decode steps for it), and tag each output with the versions that produced its tokens.

    python examples/worker.py demo 3        # until it holds version 3 (see trainer.py)
"""

import os
import sys
import threading
import time

import torch

import wsync

bus, last_version = sys.argv[1], int(sys.argv[2])
torch.manual_seed(1)  # other weights than the trainer's: only wsync makes them equal
policy = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 16))
steps = threading.Lock()  # held by each decode step, and by the worker from pause to resume


def pause(mode: str, round_: int) -> None:  # returns once no step reads the weights (between two steps)
    steps.acquire()


with torch.no_grad(), wsync.Worker(bus, agent_id=f"worker-{os.getpid()}", tensors=policy.named_parameters(),
                                   on_pause=pause, on_resume=lambda version: steps.release()) as worker:
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
