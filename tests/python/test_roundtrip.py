"""Versions from a Python trainer to Python worker processes over shm, byte for byte: numpy arrays and torch CPU
tensors (bf16; fp8 where this torch has it), through the shipped wsync-coordinator program."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "helpers"))
import models
from dumps import check_dumps

import wsync

torch = pytest.importorskip("torch")

FP8 = hasattr(torch, "float8_e4m3fn") and hasattr(torch, "float8_e5m2")
NO_FP8 = f"torch {torch.__version__} has no float8 dtypes (float8_e4m3fn / float8_e5m2 arrived in torch 2.1)"


def start_workers(helpers, bus, kind, dump_dir, count, until):
    workers = [
        helpers(
            "worker.py",
            "--bus",
            bus,
            "--id",
            f"w{index}",
            "--kind",
            kind,
            "--dump-dir",
            str(dump_dir),
            "--until-version",
            str(until),
        )
        for index in range(count)
    ]
    for worker in workers:
        worker.expect("ready")
    return workers


def finish_workers(workers, dump_dir, expected, last_version):
    for index, worker in enumerate(workers):
        done = worker.expect("done")
        assert done["version"] == last_version
        assert done["callback_errors"] == 0
        assert worker.wait() == 0, worker.stderr()
        assert check_dumps(dump_dir, f"w{index}", expected, last_version) >= 2


def test_numpy_arrays_reach_two_worker_processes_byte_for_byte(coordinator, helpers, tmp_path):
    workers = start_workers(helpers, coordinator.bus, "numpy", tmp_path, 2, 3)
    arrays = models.numpy_tensors()
    payload = sum(array.nbytes for array in arrays.values())
    with wsync.Trainer(coordinator.bus, agent_id="trainer") as trainer:
        for version in (1, 2, 3):
            models.fill_numpy(arrays, version)
            # A mapping the first time (it declares the manifest), then the fast path: the same memory again.
            handle = trainer.publish(version, arrays if version == 1 else None, label=f"step-{version}")
            outcome = handle.wait(timeout=30)
            assert outcome.committed and outcome.kind == "committed"
            assert (outcome.version, outcome.bytes) == (version, payload)
            assert outcome.reason is None and outcome.refusal is None
            assert outcome.total >= outcome.sending >= 0 and outcome.digest != (0, 0)
            assert handle.done() and handle.outcome is outcome
        assert trainer.committed_version == 3
        assert [entry[0] for entry in trainer.manifest] == [name for name, _, _ in models.NUMPY_SPEC]
    finish_workers(workers, tmp_path, models.numpy_bytes, 3)
    assert coordinator.committed_version == 3


def test_torch_parameters_bf16_in_place_with_the_fast_path(coordinator, helpers, tmp_path):
    workers = start_workers(helpers, coordinator.bus, "torch", tmp_path, 2, 4)
    model = models.torch_model()
    named = list(model.named_parameters())
    assert all(tensor.dtype == torch.bfloat16 for _, tensor in named)
    expected = {}
    for version in (0, 1, 2, 3, 4):
        models.fill_torch(named, version)
        expected[version] = models.torch_bytes(named)
    with wsync.Trainer(coordinator.bus, agent_id="trainer") as trainer:
        for version in (1, 2, 3, 4):
            models.fill_torch(named, version)  # the optimizer's in-place update
            tensors = model.named_parameters() if version == 1 else (model.state_dict() if version == 3 else None)
            assert trainer.publish(version, tensors).wait(timeout=30).committed
    finish_workers(workers, tmp_path, expected.__getitem__, 4)


@pytest.mark.skipif(not FP8, reason=NO_FP8)
def test_torch_fp8_parameters(coordinator, helpers, tmp_path):
    workers = start_workers(helpers, coordinator.bus, "torch-fp8", tmp_path, 1, 2)
    model = models.torch_model(fp8=True)
    named = list(model.named_parameters())
    assert {tensor.dtype for _, tensor in named} >= {torch.float8_e4m3fn, torch.float8_e5m2}
    expected = {}
    for version in (0, 1, 2):
        models.fill_torch(named, version)
        expected[version] = models.torch_bytes(named)
    with wsync.Trainer(coordinator.bus, agent_id="trainer") as trainer:
        assert trainer.manifest == []
        for version in (1, 2):
            models.fill_torch(named, version)
            assert trainer.publish(version, model.named_parameters()).wait(timeout=30).committed
        assert {dtype for _, dtype, _ in trainer.manifest} >= {"F8_E4M3", "F8_E5M2"}
    finish_workers(workers, tmp_path, expected.__getitem__, 2)


def test_trainer_and_workers_all_separate_processes(coordinator, helpers, tmp_path):
    workers = start_workers(helpers, coordinator.bus, "numpy", tmp_path, 2, 3)
    trainer = helpers(
        "trainer.py", "--bus", coordinator.bus, "--kind", "numpy", "--versions", "1,2,3", "--pause-mode", "wait"
    )
    for version in (1, 2, 3):
        outcome = trainer.expect("outcome", version=version)
        assert outcome["kind"] == "committed", outcome
    assert trainer.wait() == 0, trainer.stderr()
    finish_workers(workers, tmp_path, models.numpy_bytes, 3)


def test_in_process_coordinator_carries_versions_too(in_process_coordinator, helpers, tmp_path):
    workers = start_workers(helpers, in_process_coordinator.bus, "numpy", tmp_path, 1, 2)
    arrays = models.numpy_tensors()
    with wsync.Trainer(in_process_coordinator.bus, agent_id="trainer") as trainer:
        for version in (1, 2):
            models.fill_numpy(arrays, version)
            assert trainer.publish(version, list(arrays.items()), pause_mode="abort").wait(timeout=30).committed
    assert in_process_coordinator.committed_version == 2
    finish_workers(workers, tmp_path, models.numpy_bytes, 2)
