"""GPU channels from Python (marker gpu; skipped without CUDA): a trainer publishes `model.named_parameters()` of
a torch model on cuda:0 into another process's model parameters, over nccl (worker on cuda:1) and cuda_ipc (worker
on the same GPU, and on cuda:1 where there is one), bf16 and fp8, every byte compared. Needs only torch with CUDA
and the built libwsync.so (a CUDA build) and wsync-coordinator: nothing is installed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "helpers"))
import models
from dumps import check_dumps

import wsync

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
FP8 = hasattr(torch, "float8_e4m3fn") and hasattr(torch, "float8_e5m2")


def cases():
    for channel, worker_device, gpus in (("nccl", "cuda:1", 2), ("cuda_ipc", "cuda:0", 1), ("cuda_ipc", "cuda:1", 2)):
        for kind in ("torch", "torch-fp8"):
            marks = []
            if GPUS < gpus:
                marks.append(pytest.mark.skip(reason=f"needs {gpus} CUDA GPU(s), this machine has {GPUS}"))
            if kind == "torch-fp8" and not FP8:
                marks.append(pytest.mark.skip(reason=f"torch {torch.__version__} has no float8 dtypes"))
            yield pytest.param(channel, worker_device, kind, marks=marks, id=f"{channel}-{worker_device}-{kind}")


@pytest.mark.parametrize("channel,worker_device,kind", list(cases()))
def test_model_parameters_into_another_process_over_the_gpu(
    channel, worker_device, kind, coordinator, helpers, tmp_path
):
    versions = (1, 2, 3)
    worker = helpers(
        "worker.py",
        "--bus",
        coordinator.bus,
        "--id",
        "w0",
        "--kind",
        kind,
        "--device",
        worker_device,
        "--dump-dir",
        str(tmp_path),
        "--until-version",
        str(versions[-1]),
    )
    worker.expect("ready", timeout=120)
    torch.cuda.set_device(0)
    model = models.torch_model(fp8=kind == "torch-fp8").to("cuda:0")
    named = list(model.named_parameters())
    dtypes = {tensor.dtype for _, tensor in named}
    assert torch.bfloat16 in dtypes and (kind != "torch-fp8" or torch.float8_e4m3fn in dtypes)
    expected = {}
    for version in (0,) + versions:
        models.fill_torch(named, version)
        expected[version] = models.torch_bytes(named)  # a host copy for the comparison only
    with wsync.Trainer(coordinator.bus, agent_id="trainer", channel=channel, cuda_device=0) as trainer:
        for version in versions:
            models.fill_torch(named, version)  # on the current stream: publish synchronises it
            tensors = model.named_parameters() if version == 1 else None
            outcome = trainer.publish(version, tensors).wait(timeout=120)
            assert outcome.committed and outcome.bytes == sum(len(data) for data in expected[version].values())
    done = worker.expect("done", timeout=120)
    assert done["version"] == versions[-1]
    assert worker.wait(60) == 0, worker.stderr()
    check_dumps(tmp_path, "w0", expected.__getitem__, versions[-1])


@pytest.mark.skipif(GPUS < 1, reason="needs a CUDA GPU")
def test_gpu_tensors_are_refused_on_shm_and_host_tensors_on_gpu_channels(in_process_coordinator):
    bus = in_process_coordinator.bus
    with wsync.Trainer(bus, agent_id="t-shm") as trainer:
        with pytest.raises(wsync.InvalidArgumentError, match="'w' is on cuda:0; the shm channel takes host"):
            trainer.publish(1, {"w": torch.zeros(4, device="cuda:0")})
    with wsync.Trainer(bus, agent_id="t-ipc", channel="cuda_ipc", cuda_device=0) as trainer:
        with pytest.raises(wsync.InvalidArgumentError, match="'w' is on cpu; this trainer's cuda_ipc channel"):
            trainer.publish(1, {"w": torch.zeros(4)})


@pytest.mark.skipif(GPUS < 1, reason="needs a CUDA GPU")
def test_cuda_ipc_trusts_its_exports_only_while_torch_frees_nothing(coordinator, helpers, tmp_path):
    """A publish over cuda_ipc tells the channel whether torch's allocator freed device memory since the previous
    one (PublishHandle.allocations_kept): not at the first; yes while nothing is freed; no after torch returned a
    block to CUDA (empty_cache: cudaFree, counted as num_device_free); yes for a rebuilt model (the old one's memory
    went back to torch's cache, not to CUDA, and the new tensors' addresses differ: exported again). Every version
    reaches the worker byte for byte."""
    versions = (1, 2, 3, 4, 5)
    worker = helpers(
        "worker.py",
        "--bus",
        coordinator.bus,
        "--id",
        "w0",
        "--kind",
        "torch",
        "--device",
        "cuda:0",
        "--dump-dir",
        str(tmp_path),
        "--until-version",
        str(versions[-1]),
    )
    worker.expect("ready", timeout=120)
    torch.cuda.set_device(0)
    model = models.torch_model().to("cuda:0")
    named = list(model.named_parameters())
    expected = {}
    for version in (0,) + versions:
        models.fill_torch(named, version)
        expected[version] = models.torch_bytes(named)
    kept = []
    with wsync.Trainer(coordinator.bus, agent_id="trainer", channel="cuda_ipc", cuda_device=0) as trainer:
        for version in versions:
            tensors = model.named_parameters() if version == 1 else None
            if version == 3:  # a block of its own (64 MiB: not cut from a shared segment), given back to CUDA
                scratch = torch.empty(16 << 20, dtype=torch.float32, device="cuda:0")
                del scratch
                torch.cuda.empty_cache()
            if version == 5:
                model = models.torch_model().to("cuda:0")
                named = list(model.named_parameters())
                tensors = model.named_parameters()
            models.fill_torch(named, version)
            handle = trainer.publish(version, tensors)
            kept.append(handle.allocations_kept)
            assert handle.wait(timeout=120).committed
    assert kept == [False, True, False, True, True]
    done = worker.expect("done", timeout=120)
    assert done["version"] == versions[-1]
    assert worker.wait(60) == 0, worker.stderr()
    check_dumps(tmp_path, "w0", expected.__getitem__, versions[-1])


@pytest.mark.parametrize(
    "engine_device",
    [
        pytest.param("cuda:0", marks=pytest.mark.skipif(GPUS < 1, reason="needs a CUDA GPU")),
        pytest.param(
            "cuda:1", marks=pytest.mark.skipif(GPUS < 2, reason=f"needs 2 CUDA GPU(s), this machine has {GPUS}")
        ),
    ],
)
def test_a_trainer_and_an_engine_in_one_process_over_cuda_ipc(in_process_coordinator, engine_device):
    """verl's hybrid engine runs the rollout engine in the trainer's process: a Trainer (cuda:0) and a Worker in one
    Python process over cuda_ipc, where CUDA cannot open the process's own IPC handles; the engine on the trainer's
    GPU or on another (read through peer access). Every version reaches the engine's parameters byte for byte, also
    after the trainer's model is rebuilt at new addresses."""
    bus = in_process_coordinator.bus
    torch.cuda.set_device(0)
    policy = models.torch_model().to("cuda:0")
    engine = models.torch_model().to(engine_device)
    parked = []  # nothing generates here: a pause has nothing to wait for

    def pause(mode, round):
        parked.append(round)

    with (
        wsync.Worker(
            bus, agent_id="engine", tensors=engine.named_parameters(), on_pause=pause, on_resume=lambda version: None
        ) as worker,
        wsync.Trainer(bus, agent_id="trainer", channel="cuda_ipc", cuda_device=0) as trainer,
    ):
        assert worker.memory == "device"
        for version in (1, 2, 3, 4):
            if version == 4:
                policy = models.torch_model().to("cuda:0")  # new addresses: exported again
            named = list(policy.named_parameters())
            models.fill_torch(named, version)
            tensors = policy.named_parameters() if version in (1, 4) else None
            assert trainer.publish(version, tensors).wait(timeout=120).committed
            worker.wait_for_version(version, timeout=60)
            torch.cuda.synchronize()
            assert models.torch_bytes(engine.named_parameters()) == models.torch_bytes(named), version
        assert worker.counters.rounds_applied == 4 and worker.counters.transfers_failed == 0
        assert len(parked) == 4
