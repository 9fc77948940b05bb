"""Run by test_wheel.py inside a fresh virtual environment where only the wsync wheel is installed (no numpy, no
torch, no WSYNC_* variables, not in the checkout): the package must find its own libwsync.so and
wsync-coordinator and move a version with plain Python buffers."""

from __future__ import annotations

import array
import os
import sys
import time

import wsync

prefix = os.path.realpath(sys.prefix)
assert os.path.realpath(wsync.__file__).startswith(prefix), (wsync.__file__, prefix)
assert os.path.realpath(wsync.library_path()).startswith(prefix), wsync.library_path()
assert "numpy" not in sys.modules and "torch" not in sys.modules

for in_process in (False, True):
    bus = f"wheel{os.getpid()}-{int(in_process)}"
    with wsync.Coordinator(bus, in_process=in_process) as coordinator:
        if not in_process:
            assert os.path.realpath(coordinator.command[0]).startswith(prefix), coordinator.command[0]
        target = array.array("d", [0.0] * 32)
        with (
            wsync.Worker(bus, agent_id="w", tensors={"weights": target}) as worker,
            wsync.Trainer(bus, agent_id="t") as trainer,
        ):
            source = array.array("d", [i * 0.5 for i in range(32)])
            outcome = trainer.publish(1, {"weights": source}).wait(timeout=60)
            assert outcome.committed and outcome.bytes == 32 * 8, outcome
            worker.wait_for_version(1, timeout=30)
            deadline = time.monotonic() + 10
            while list(target) != list(source) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert list(target) == list(source)
        assert wsync.status(bus)["committed_version"] == 1

print(f"WHEEL OK python {sys.version_info.major}.{sys.version_info.minor} wsync {wsync.native_version()}")
