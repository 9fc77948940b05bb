#!/usr/bin/env python3
"""A trainer: after every optimizer step, publish the policy's weights as the next version to every worker.
Run it as examples/README.md says:

    wsync-coordinator --bus demo &          # one per bus (or wsync.Coordinator("demo") in Python)
    python examples/worker.py demo 3 w0 &   # any number of workers, each with an agent id
    python examples/trainer.py demo 3 1     # 3 versions, for 1 worker
"""

from __future__ import annotations

import sys
import time

import torch

import wsync

bus, versions, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
policy = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 16))
optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)

with wsync.Trainer(bus, agent_id="trainer-0") as trainer:
    # A round reaches the workers on the bus when it begins: wait until they have joined.
    while sum(agent["role"] == "worker" for agent in wsync.status(bus)["agents"]) < workers:
        time.sleep(0.1)
    for version in range(1, versions + 1):
        time.sleep(0.1)  # stands in for an RL step's rollouts and rewards
        loss = policy(torch.randn(32, 16)).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        # Zero-copy from the parameters themselves, which must not change until the outcome is known.
        outcome = trainer.publish(version, policy.named_parameters()).wait(timeout=60)
        checksum = sum(p.detach().double().sum().item() for p in policy.parameters())
        print(
            f"version {version} {outcome.kind}: {outcome.bytes} bytes in {outcome.total * 1e3:.1f} ms, "
            f"checksum {checksum:.6f}",
            flush=True,
        )
