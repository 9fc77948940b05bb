"""Every abort reason a Python trainer can provoke surfaces as its exception, with real worker processes: a
version that does not increase, a pause callback that raises, a worker killed mid-round, a manifest mismatch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "helpers"))
import models
from dumps import check_dumps, read_dumps

import wsync


def agent(status, agent_id):
    for entry in status.get("agents", []):
        if entry.get("agent_id") == agent_id:
            return entry
    raise AssertionError(f"agent {agent_id} not in the status: {status}")


def test_a_version_that_does_not_increase_is_refused(coordinator, helpers, tmp_path):
    worker = helpers("worker.py", "--bus", coordinator.bus, "--id", "w0", "--dump-dir", str(tmp_path))
    worker.expect("ready")
    arrays = models.numpy_tensors()
    with wsync.Trainer(coordinator.bus, agent_id="trainer") as trainer:
        models.fill_numpy(arrays, 2)
        assert trainer.publish(2, arrays).wait(timeout=30).committed
        for stale in (2, 1):
            with pytest.raises(wsync.RefusedError) as refused:
                trainer.publish(stale).wait(timeout=30)
            assert refused.value.refusal == "VersionNotIncreasing"
            assert refused.value.outcome.kind == "refused" and refused.value.outcome.version == stale
            assert refused.value.status == "refused"
            assert "VersionNotIncreasing" in str(refused.value)
        assert trainer.committed_version == 2
        models.fill_numpy(arrays, 3)
        assert trainer.publish(3).wait(timeout=30).committed  # the bus goes on above the committed version
    worker.expect("resume", version=3)
    assert worker.finish() == 0
    check_dumps(tmp_path, "w0", models.numpy_bytes, 3)


def test_a_pause_callback_that_raises_aborts_the_round_and_the_worker_keeps_its_version(coordinator, helpers, tmp_path):
    worker = helpers(
        "worker.py",
        "--bus",
        coordinator.bus,
        "--id",
        "w0",
        "--dump-dir",
        str(tmp_path),
        "--fail-pause",
        "2",
        "--until-version",
        "3",
    )
    worker.expect("ready")
    arrays = models.numpy_tensors()
    with wsync.Trainer(coordinator.bus, agent_id="trainer") as trainer:
        models.fill_numpy(arrays, 1)
        assert trainer.publish(1, arrays).wait(timeout=30).committed
        models.fill_numpy(arrays, 2)
        with pytest.raises(wsync.AbortedError) as aborted:
            trainer.publish(2).wait(timeout=30)
        assert aborted.value.reason == "AgentRefused"
        assert "engine refuses pause 2" in aborted.value.outcome.detail  # the exception's text reaches the trainer
        assert "RuntimeError" in aborted.value.outcome.detail
        assert aborted.value.status == "aborted"
        # The worker serves version 1 still, and says so; its bytes are version 1's (checked with the dumps).
        assert agent(wsync.status(coordinator.bus), "w0")["applied_version"] == 1
        worker.send("dump")
        assert worker.expect("dumped")["version"] == 1
        assert trainer.committed_version == 1
        models.fill_numpy(arrays, 3)
        assert trainer.publish(3).wait(timeout=30).committed  # the next round commits
    done = worker.expect("done")
    assert done["version"] == 3
    assert done["counters"]["rounds_applied"] == 2 and done["counters"]["rounds_refused"] == 1, done
    assert worker.wait() == 0, worker.stderr()
    dumps = read_dumps(tmp_path, "w0")
    assert [dump["version"] for dump in dumps][:2] == [1, 1]  # after version 1's resume, and after the abort
    check_dumps(tmp_path, "w0", models.numpy_bytes, 3)


def test_a_worker_killed_mid_round_aborts_it_with_agent_died(coordinator, helpers, tmp_path):
    survivor = helpers(
        "worker.py", "--bus", coordinator.bus, "--id", "w0", "--dump-dir", str(tmp_path), "--until-version", "3"
    )
    victim = helpers("worker.py", "--bus", coordinator.bus, "--id", "w1", "--hang-pause", "2")
    survivor.expect("ready")
    victim.expect("ready")
    arrays = models.numpy_tensors()
    with wsync.Trainer(coordinator.bus, agent_id="trainer") as trainer:
        models.fill_numpy(arrays, 1)
        assert trainer.publish(1, arrays).wait(timeout=30).committed
        models.fill_numpy(arrays, 2)
        handle = trainer.publish(2)
        victim.expect("hanging")  # w1 is inside its pause callback: the round is under way
        victim.kill()
        with pytest.raises(wsync.AbortedError) as aborted:
            handle.wait(timeout=30)
        assert aborted.value.reason == "AgentDied"
        assert "w1" in aborted.value.outcome.detail
        assert agent(wsync.status(coordinator.bus), "w0")["applied_version"] == 1
        models.fill_numpy(arrays, 3)
        assert trainer.publish(3).wait(timeout=30).committed  # the survivor takes the next version
    assert survivor.expect("done")["version"] == 3
    assert survivor.wait() == 0
    check_dumps(tmp_path, "w0", models.numpy_bytes, 3)


def test_a_manifest_mismatch_fails_the_round_naming_the_tensor(coordinator, helpers, tmp_path):
    worker = helpers(
        "worker.py", "--bus", coordinator.bus, "--id", "w0", "--dump-dir", str(tmp_path), "--mismatch", "layers.0.ids"
    )
    worker.expect("ready")
    arrays = models.numpy_tensors()
    models.fill_numpy(arrays, 1)
    with wsync.Trainer(coordinator.bus, agent_id="trainer") as trainer:
        with pytest.raises(wsync.AbortedError) as aborted:
            trainer.publish(1, arrays).wait(timeout=30)
        assert aborted.value.reason == "ManifestMismatch", aborted.value
        assert "layers.0.ids" in aborted.value.outcome.detail
        assert aborted.value.tensor == "layers.0.ids"
        assert trainer.committed_version == 0
    assert worker.finish() == 0


def test_the_trainer_refuses_tensors_that_disagree_with_its_manifest(in_process_coordinator):
    np = pytest.importorskip("numpy")
    bus = in_process_coordinator.bus
    worker_arrays = {"a": np.zeros((2, 3), np.float32), "b": np.zeros(4, np.int64)}
    with wsync.Worker(bus, agent_id="w", tensors=worker_arrays), wsync.Trainer(bus, agent_id="t") as trainer:
        assert trainer.publish(1, {"a": np.ones((2, 3), np.float32), "b": np.ones(4, np.int64)}).wait(30).committed
        cases = {
            "a": {"a": np.ones((3, 2), np.float32), "b": np.ones(4, np.int64)},  # shape
            "b": {"a": np.ones((2, 3), np.float32), "b": np.ones(4, np.int32)},  # dtype
            "c": {"a": np.ones((2, 3), np.float32), "b": np.ones(4, np.int64), "c": np.ones(1)},  # extra
        }
        for tensor, tensors in cases.items():
            with pytest.raises(wsync.ManifestMismatchError) as mismatch:
                trainer.publish(2, tensors)
            assert mismatch.value.tensor == tensor, mismatch.value
            assert f"'{tensor}'" in str(mismatch.value)
            assert isinstance(mismatch.value, ValueError)
        with pytest.raises(wsync.ManifestMismatchError) as missing:
            trainer.publish(2, {"a": np.ones((2, 3), np.float32)})
        assert missing.value.tensor == "b"
        # Another order is fine: tensors are matched to the manifest by name.
        reordered = [("b", np.full(4, 7, np.int64)), ("a", np.full((2, 3), 5, np.float32))]
        assert trainer.publish(2, reordered).wait(30).committed
    assert (worker_arrays["b"] == 7).all() and (worker_arrays["a"] == 5).all()
