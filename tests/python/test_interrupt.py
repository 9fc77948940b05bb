"""Ctrl-C: a process blocked in one of wsync's waits (no timeout) ends promptly with KeyboardInterrupt."""

from __future__ import annotations

import signal
import time

import pytest

# From SIGINT to the process's exit: one 100 ms slice, the clean-up (closing agents and the coordinator) and
# the interpreter's exit on a loaded 2-core machine.
PROMPT_SECONDS = 5.0


@pytest.mark.parametrize("mode", ["wait_for_version", "publish_wait", "events"])
def test_ctrl_c_ends_a_blocking_wait(mode, bus, helpers):
    child = helpers("interrupt.py", mode, bus)
    child.expect("text", timeout=60, text="waiting")
    time.sleep(0.5)  # well inside the wait
    sent = time.monotonic()
    child.kill(signal.SIGINT)
    code = child.wait(timeout=PROMPT_SECONDS + 10)
    elapsed = time.monotonic() - sent
    assert code in (-signal.SIGINT, 130, 1), child.stderr()
    assert "KeyboardInterrupt" in child.stderr()
    line = child.expect("text", timeout=5)
    assert line["text"].startswith("KeyboardInterrupt after"), line
    assert elapsed < PROMPT_SECONDS, f"exited {elapsed:.2f} s after SIGINT"
