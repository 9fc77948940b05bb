"""examples/trainer.py and examples/worker.py, run as examples/README.md runs them: the shipped coordinator program,
two worker processes and a trainer process. Every version commits, every worker ends holding the trainer's last
version (their checksums agree), and every output's spans are consistent."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import wsync

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# The examples' own waits are 60 s; this only bounds a stalled run.
RUN_TIMEOUT_SECONDS = 120

pytest.importorskip("torch")


def start(script: str, *arguments: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(EXAMPLES / script), *arguments], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(process: subprocess.Popen) -> list[str]:
    try:
        stdout, stderr = process.communicate(timeout=RUN_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
    assert process.returncode == 0, f"{process.args[1:]} exited {process.returncode}:\n{stdout}\n{stderr[-4000:]}"
    return stdout.splitlines()


def test_the_trainer_and_worker_examples_carry_every_version(coordinator):
    versions, workers = 3, 2
    started = [start("worker.py", coordinator.bus, str(versions), f"w{index}") for index in range(workers)]
    try:
        trainer = finish(start("trainer.py", coordinator.bus, str(versions), str(workers)))
        served = [finish(worker) for worker in started]
    finally:
        for worker in started:
            if worker.poll() is None:
                worker.kill()
                worker.communicate()
    assert [line.split(":")[0] for line in trainer] == [f"version {v} committed" for v in range(1, versions + 1)]
    checksum = trainer[-1].rsplit("checksum ", 1)[1]
    for lines in served:
        assert lines[-1] == f"holds version {versions}, checksum {checksum}", lines[-5:]
        outputs = [ast.literal_eval(line.removeprefix("output spans ")) for line in lines[:-1]]
        assert outputs and all(line.startswith("output spans ") for line in lines[:-1])
        for spans in outputs:
            wsync.check_spans(spans, 8)
        seen = [version for spans in outputs for _, version in spans]
        assert seen == sorted(seen) and 1 <= seen[0] and seen[-1] <= versions
    assert coordinator.committed_version == versions


def test_the_examples_stay_short_enough_to_copy():
    for script in ("trainer.py", "worker.py"):
        source = (EXAMPLES / script).read_text()
        assert len(source.splitlines()) <= 45, script  # about 40: short enough to read at once
        assert re.search(rf"wsync\.{'Trainer' if script == 'trainer.py' else 'Worker'}\(", source)
