"""A frontier MoE's tensor count through the Python faces (issue 18): 100,000 small numpy arrays or torch tensors
from a Python trainer to Python worker processes over shm, byte for byte, and one wrong shape among them named."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "helpers"))
import models
from dumps import check_dumps

import wsync

# The C++ agents and the shm channel take this count in milliseconds; the Python helpers building, filling and
# dumping 100,000 arrays take seconds on CI's 2 cores, under ASan more.
TIMEOUT_S = 120


def trainer_tensors(kind: str, arrays):
    """The trainer's tensors: the numpy arrays themselves, or torch CPU tensors over the same memory (a PyTorch
    trainer's parameters, split from one flat storage)."""
    if kind == "numpy":
        return arrays
    torch = pytest.importorskip("torch")
    return {name: torch.from_numpy(array) for name, array in arrays.items()}


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_a_hundred_thousand_tensors_reach_two_worker_processes_byte_for_byte(coordinator, helpers, tmp_path, kind):
    workers = [
        helpers(
            "worker.py",
            "--bus",
            coordinator.bus,
            "--id",
            f"w{index}",
            "--kind",
            "many",
            "--dump-dir",
            str(tmp_path),
            "--until-version",
            "3",
            "--timeout",
            str(TIMEOUT_S),
        )
        for index in range(2)
    ]
    for worker in workers:
        worker.expect("ready", timeout=TIMEOUT_S)
    arrays = models.many_tensors()
    tensors = trainer_tensors(kind, arrays)
    payload = sum(array.nbytes for array in arrays.values())
    with wsync.Trainer(coordinator.bus, agent_id="trainer") as trainer:
        for version in (1, 2, 3):
            models.fill_many(arrays, version)
            # The mapping once (it declares the manifest of 100,000 entries), then the same memory by name only.
            handle = trainer.publish(version, tensors if version == 1 else None)
            outcome = handle.wait(timeout=TIMEOUT_S)
            assert outcome.committed, outcome
            assert (outcome.version, outcome.bytes) == (version, payload)
        assert len(trainer.manifest) == models.MANY_COUNT
    for index, worker in enumerate(workers):
        assert worker.expect("done", timeout=TIMEOUT_S)["version"] == 3
        assert worker.wait() == 0, worker.stderr()
        assert check_dumps(tmp_path, f"w{index}", models.many_bytes, 3) >= 2


def test_one_wrong_shape_among_a_hundred_thousand_is_named(coordinator, helpers, tmp_path):
    wrong = "layers.99.experts.998.w"
    worker = helpers(
        "worker.py",
        "--bus",
        coordinator.bus,
        "--id",
        "w0",
        "--kind",
        "many",
        "--mismatch",
        wrong,
        "--timeout",
        str(TIMEOUT_S),
    )
    worker.expect("ready", timeout=TIMEOUT_S)
    arrays = models.many_tensors()
    models.fill_many(arrays, 1)
    with wsync.Trainer(coordinator.bus, agent_id="trainer") as trainer:
        with pytest.raises(wsync.AbortedError) as aborted:
            trainer.publish(1, arrays).wait(timeout=TIMEOUT_S)
        assert aborted.value.reason == "ManifestMismatch", aborted.value
        assert aborted.value.tensor == wrong, aborted.value
        assert trainer.committed_version == 0
    assert worker.finish() == 0


def test_a_manifest_too_large_for_one_control_message_is_refused_at_once_and_named(coordinator):
    """80,000 tensors with names of 400 bytes encode to more than a control message may carry: publish() raises at
    once, saying so, rather than the round failing on the wire; the trainer then publishes a manifest that fits."""
    np = pytest.importorskip("numpy")
    count, name_bytes = 80_000, 400
    storage = np.zeros(count * 4, dtype=np.float32)
    too_long = {
        f"layers.{index}.".ljust(name_bytes, "w"): storage[index * 4 : (index + 1) * 4] for index in range(count)
    }
    with wsync.Trainer(coordinator.bus, agent_id="trainer") as trainer:
        with pytest.raises(wsync.InvalidArgumentError, match=f"{count} tensors encode to .* one control message"):
            trainer.publish(1, too_long)
        assert trainer.committed_version == 0
        fits = {name[:40]: array for name, array in list(too_long.items())[:1000]}
        outcome = trainer.publish(1, fits).wait(timeout=TIMEOUT_S)
        assert outcome.committed, outcome
        assert outcome.bytes == 1000 * 4 * 4


GPUS = 0
try:
    import torch as _torch

    GPUS = _torch.cuda.device_count() if _torch.cuda.is_available() else 0
except ImportError:
    pass


def gpu_cases():
    for channel, worker_device, gpus in (("cuda_ipc", "cuda:0", 1), ("nccl", "cuda:1", 2)):
        marks = [pytest.mark.gpu]
        if GPUS < gpus:
            marks.append(pytest.mark.skip(reason=f"needs {gpus} CUDA GPU(s), this machine has {GPUS}"))
        yield pytest.param(channel, worker_device, marks=marks, id=f"{channel}-{worker_device}")


@pytest.mark.parametrize("channel,worker_device", list(gpu_cases()))
def test_a_hundred_thousand_gpu_tensors_reach_another_process_byte_for_byte(
    channel, worker_device, coordinator, helpers, tmp_path
):
    """The same count in device memory over the GPU channels: 100,000 views of one flat storage on cuda:0 into
    another process's views on `worker_device`."""
    torch = pytest.importorskip("torch")
    worker = helpers(
        "worker.py",
        "--bus",
        coordinator.bus,
        "--id",
        "w0",
        "--kind",
        "many",
        "--device",
        worker_device,
        "--dump-dir",
        str(tmp_path),
        "--until-version",
        "3",
        "--timeout",
        str(TIMEOUT_S),
    )
    worker.expect("ready", timeout=TIMEOUT_S)
    torch.cuda.set_device(0)
    tensors = models.many_torch("cuda:0")
    payload = sum(tensor.numel() * tensor.element_size() for tensor in tensors.values())
    with wsync.Trainer(coordinator.bus, agent_id="trainer", channel=channel, cuda_device=0) as trainer:
        for version in (1, 2, 3):
            models.fill_many_torch(tensors, version)  # on the current stream: publish synchronises it
            outcome = trainer.publish(version, tensors if version == 1 else None).wait(timeout=TIMEOUT_S)
            assert outcome.committed, outcome
            assert (outcome.version, outcome.bytes) == (version, payload)
    assert worker.expect("done", timeout=TIMEOUT_S)["version"] == 3
    assert worker.wait(60) == 0, worker.stderr()
    assert check_dumps(tmp_path, "w0", models.many_bytes, 3) >= 2
