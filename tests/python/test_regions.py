"""Sharded sources and sliced receivers from Python (docs/regions.md), with real processes: two FSDP2 ranks (gloo,
on the CPU) each publish their own shards of a torch model, no full_tensor() gather; a data-parallel worker takes
the whole model, and the two ranks of a tensor-parallel engine take their column slices. Every worker must hold
exactly its part of what the ranks hold; a worker whose slices do not fit the model is refused by name before any
engine pauses, and the others keep serving."""

from __future__ import annotations

import multiprocessing
import queue as queues

import numpy as np
import pytest
import torch

import wsync

RANKS = 2
VERSIONS = (1, 2)
TIMEOUT_S = 60.0
# (name, shape) of the model below, as FSDP2 names its parameters.
SHAPES = {"0.weight": (24, 16), "0.bias": (24,), "2.weight": (10, 24), "2.bias": (10,)}


def has_fsdp2() -> bool:
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except Exception:  # noqa: BLE001 - ImportError, or torch 1.13's import failing outright on Python 3.11
        return False
    return True


pytestmark = pytest.mark.skipif(not has_fsdp2(), reason=f"torch {torch.__version__} has no FSDP2 (fully_shard)")


def rank_main(rank: int, bus: str, init_file: str, versions, answers) -> None:
    """One FSDP2 rank: its shards of the model, its own wsync.Trainer; for each version, a step of its own on the
    shards, then publish. The full tensors are gathered only to tell the test what the workers must hold."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=RANKS)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.ReLU(), torch.nn.Linear(24, 10))
        fully_shard(model, mesh=init_device_mesh("cpu", (RANKS,)))
        with wsync.Trainer(bus, agent_id=f"trainer-{rank}") as trainer:
            for version in versions:
                with torch.no_grad():
                    for parameter in model.parameters():
                        parameter.mul_(1.5).add_(version)  # each rank on its own shards
                kinds = sorted({type(parameter).__name__ for parameter in model.parameters()})
                try:
                    outcome = trainer.publish(version, model.named_parameters()).wait(TIMEOUT_S)
                    result = {"committed": outcome.committed, "detail": outcome.detail}
                except wsync.Error as error:
                    result = {"committed": False, "detail": str(error), "reason": getattr(error, "reason", "")}
                full = {name: p.full_tensor().detach().numpy().copy() for name, p in model.named_parameters()}
                answers.put((rank, version, result, kinds, full if rank == 0 else None))
    finally:
        torch.distributed.destroy_process_group()


def column_slices(rank: int) -> tuple[dict[str, np.ndarray], list[tuple]]:
    """A tensor-parallel rank's tensors and slices: its half of the last dim of every tensor."""
    tensors, slices = {}, []
    for name, shape in SHAPES.items():
        half = shape[-1] // RANKS
        local = (*shape[:-1], half)
        tensors[name] = np.zeros(local, dtype=np.float32)
        region = tuple(slice(0, extent) for extent in shape[:-1]) + (slice(rank * half, (rank + 1) * half),)
        slices.append((name, region, name))
    return tensors, slices


def expected_slice(full: np.ndarray, rank: int) -> np.ndarray:
    half = full.shape[-1] // RANKS
    return full[..., rank * half : (rank + 1) * half]


def run_ranks(bus: str, tmp_path, versions=VERSIONS):
    context = multiprocessing.get_context("spawn")
    answers = context.Queue()
    processes = [
        context.Process(target=rank_main, args=(rank, bus, str(tmp_path / "rendezvous"), versions, answers))
        for rank in range(RANKS)
    ]
    for process in processes:
        process.start()
    results = {}
    try:
        for _ in range(RANKS * len(versions)):
            rank, version, result, kinds, full = answers.get(timeout=TIMEOUT_S * 2)
            results[(rank, version)] = (result, kinds, full)
    except queues.Empty:
        pytest.fail(f"the ranks answered {sorted(results)} only")
    finally:
        for process in processes:
            process.join(TIMEOUT_S)
            if process.is_alive():
                process.kill()
    assert [process.exitcode for process in processes] == [0] * RANKS
    return results


def paused_worker(bus: str, agent_id: str, tensors, slices=None) -> wsync.Worker:
    """A worker whose engine has nothing to quiesce: it pauses at once."""
    return wsync.Worker(
        bus, agent_id=agent_id, tensors=tensors, on_pause=lambda *_: None, on_resume=lambda *_: None, slices=slices
    )


def test_fsdp2_ranks_publish_their_shards_to_whole_and_sliced_workers(coordinator, tmp_path):
    whole = {name: np.zeros(shape, dtype=np.float32) for name, shape in SHAPES.items()}
    sliced = [column_slices(rank) for rank in range(RANKS)]
    with (
        paused_worker(coordinator.bus, "dp", whole) as dp,
        paused_worker(coordinator.bus, "tp0", sliced[0][0], sliced[0][1]) as tp0,
        paused_worker(coordinator.bus, "tp1", sliced[1][0], sliced[1][1]) as tp1,
    ):
        results = run_ranks(coordinator.bus, tmp_path)
        for (rank, version), (result, kinds, _) in sorted(results.items()):
            assert result["committed"], (rank, version, result)
            assert kinds == ["DTensor"], "FSDP2 leaves every parameter a DTensor: published as shards"
        last = VERSIONS[-1]
        for worker in (dp, tp0, tp1):
            worker.wait_for_version(last, timeout=TIMEOUT_S)
        full = results[(0, last)][2]
        for name in SHAPES:
            np.testing.assert_array_equal(whole[name], full[name], err_msg=f"dp's '{name}'")
            for rank in range(RANKS):
                np.testing.assert_array_equal(
                    sliced[rank][0][name], expected_slice(full[name], rank), err_msg=f"tp{rank}'s '{name}'"
                )
        assert all(np.any(full[name] != 0) for name in SHAPES), "a model of zeros would prove nothing"


def test_a_worker_whose_slice_falls_outside_a_tensor_is_refused_by_name_and_nobody_moves(coordinator, tmp_path):
    good = {name: np.zeros(shape, dtype=np.float32) for name, shape in SHAPES.items()}
    bad = {"0.weight": np.zeros((24, 8), dtype=np.float32)}
    outside = [("0.weight", (slice(0, 24), slice(12, 20)), "0.weight")]  # columns 16..19 do not exist
    with paused_worker(coordinator.bus, "good", good), paused_worker(coordinator.bus, "bad", bad, outside):
        results = run_ranks(coordinator.bus, tmp_path, versions=(1,))
        for rank in range(RANKS):
            result = results[(rank, 1)][0]
            assert not result["committed"]
            assert "worker 'bad'" in result["detail"] and "0.weight" in result["detail"], result
        assert not any(array.any() for array in good.values()), "the good worker keeps version 0"


def test_slices_that_are_not_boxes_are_refused_when_bound(coordinator):
    tensors = {"w": np.zeros((4, 4), dtype=np.float32)}
    refused = [
        ("step", ("w", (slice(0, 4, 2), slice(0, 4)), "w")),
        ("both bounds", ("w", (slice(None), slice(0, 4)), "w")),
        ("not bound", ("w", ((0, 4), (0, 4)), "v")),
    ]
    for says, bound in refused:
        with pytest.raises(wsync.InvalidArgumentError, match=says):
            paused_worker(coordinator.bus, "w", tensors, [bound])


def test_the_fsdp2_example_publishes_shards_to_data_parallel_engines(tmp_path):
    """examples/rl/fsdp2_to_dp.py as a user runs it: every rank publishes its shards, and its own checks (every
    engine byte for byte and token for token the unsharded model's, before and after training) pass."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "rl" / "fsdp2_to_dp.py"
    record = tmp_path / "record.json"
    done = subprocess.run(
        [sys.executable, str(example), "--json", str(record)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    checks = json.loads(record.read_text())["checks"]
    assert all(check["passed"] for check in checks), [check for check in checks if not check["passed"]]
    assert any("holds version 2 byte for byte" in check["check"] for check in checks)
