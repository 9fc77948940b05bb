"""The vLLM weight-transfer backend (python/wsync/vllm, docs/vllm.md).

Four groups, each skipped with its reason when what it needs is missing:
  - package: `import wsync.vllm` pulls in neither vLLM nor torch; pause modes.
  - contract: against vLLM's real classes (needs vLLM importable): the engines subclass vLLM's bases and implement
    every abstract method with vLLM's signature, register() makes vLLM's registries resolve "wsync" and is
    harmless twice, vLLM parses the sender's dicts, the entry point loads register().
  - logic: the staging guard and the update flow with a stand-in wsync Worker/Trainer (needs torch only), and the
    same through vLLM's engine and trainer factory (needs vLLM).
  - data path: real wsync rounds through the native library and the coordinator into a stand-in model that has
    `load_weights` (needs torch and a loadable libwsync.so).
"""

from __future__ import annotations

import importlib.metadata
import inspect
import itertools
import json
import os
import subprocess
import sys
import threading
import time
import typing
from types import SimpleNamespace

import pytest

try:
    import wsync
    import wsync.vllm as wv
    from wsync.vllm import sender as wsender
    from wsync.vllm import staging as wstaging
except Exception as error:  # noqa: BLE001 - the package (python branch) is not importable here
    pytest.skip(f"the wsync package is not importable: {error}", allow_module_level=True)

try:
    import torch
except ImportError:
    torch = None

try:
    from vllm.distributed.weight_transfer import base as vllm_base
    from vllm.distributed.weight_transfer import factory as vllm_factory

    VLLM_MISSING = None
except Exception as error:  # noqa: BLE001 - ImportError, or a vLLM that fails to import on this machine
    vllm_base = vllm_factory = None
    VLLM_MISSING = f"vLLM's weight transfer is not importable here: {type(error).__name__}: {error}"

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not importable")
needs_vllm = pytest.mark.skipif(VLLM_MISSING is not None, reason=VLLM_MISSING or "")

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(wsync.__file__)))
HIDDEN = 4
_bus_numbers = itertools.count()


# ---------------------------------------------------------------------------------------------------------------
# Stand-ins
# ---------------------------------------------------------------------------------------------------------------


def trainer_tensors(seed: float) -> dict:
    """A trainer's checkpoint-format tensors: separate q/k/v projections and a bf16 norm."""
    h = HIDDEN
    return {
        "layer.q_proj.weight": torch.full((h, h), seed + 0.25),
        "layer.k_proj.weight": torch.arange(h * h, dtype=torch.float32).reshape(h, h) + seed,
        "layer.v_proj.weight": torch.full((h, h), -seed),
        "layer.norm.weight": torch.full((h,), seed, dtype=torch.bfloat16),
    }


def _stand_in_model_class():
    class StandInModel(torch.nn.Module):
        """What a vLLM model looks like to a weight-transfer engine: parameters named and fused its own way (q/k/v
        in one qkv_proj), and `load_weights(iterable of (checkpoint name, tensor))` that maps and copies."""

        _SHARDS = {"q_proj": 0, "k_proj": 1, "v_proj": 2}

        def __init__(self) -> None:
            super().__init__()
            self.qkv_proj = torch.nn.Parameter(torch.zeros(3 * HIDDEN, HIDDEN), requires_grad=False)
            self.norm = torch.nn.Parameter(torch.zeros(HIDDEN, dtype=torch.bfloat16), requires_grad=False)
            self.calls: list[list[str]] = []

        def load_weights(self, weights):
            names = []
            for name, tensor in weights:
                names.append(name)
                projection = name.split(".")[1]
                if projection in self._SHARDS:
                    index = self._SHARDS[projection]
                    self.qkv_proj.data[index * HIDDEN : (index + 1) * HIDDEN].copy_(tensor)
                elif name == "layer.norm.weight":
                    self.norm.data.copy_(tensor)
                else:
                    raise KeyError(name)
            self.calls.append(names)
            return {"qkv_proj", "norm"}

        def expected_from(self, tensors: dict) -> tuple:
            qkv = torch.cat([tensors[f"layer.{p}_proj.weight"] for p in ("q", "k", "v")])
            return qkv, tensors["layer.norm.weight"]

    return StandInModel


def stand_in_model():
    return _stand_in_model_class()()


def assert_model_holds(model, tensors: dict) -> None:
    qkv, norm = model.expected_from(tensors)
    assert torch.equal(model.qkv_proj.data, qkv)
    assert torch.equal(model.norm.data, norm)


class FakeWorker:
    """wsync.Worker as the agreed API describes it, without a bus: `deliver` plays a round (pause hook, bytes
    written into the bound tensors, applied version, resume hook) on its own thread, as the agent's I/O thread
    would."""

    instances: list[FakeWorker] = []

    def __init__(self, bus, *, agent_id, tensors, on_pause, on_resume, **options):
        self.bus, self.agent_id, self.tensors, self.options = bus, agent_id, dict(tensors), options
        self.on_pause, self.on_resume = on_pause, on_resume
        self._applied = 0
        self._cond = threading.Condition()
        self.closed = False
        self.refusals: list[str] = []
        FakeWorker.instances.append(self)

    @property
    def applied_version(self) -> int:
        return self._applied

    def wait_for_version(self, version, timeout=None):
        with self._cond:
            if not self._cond.wait_for(lambda: self._applied >= version, timeout=timeout):
                raise wsync.TimeoutError(f"version {version} not applied within {timeout} s")
            return self._applied

    def deliver(self, version: int, values: dict, mode: str = "keep") -> bool:
        """One round, synchronously on the calling thread. False when the pause hook refused it."""
        try:
            self.on_pause(mode, version)
        except Exception as error:  # noqa: BLE001 - a refusal, whatever the hook raised
            self.refusals.append(str(error))
            return False
        for name, value in values.items():
            self.tensors[name].copy_(value)
        with self._cond:
            self._applied = version
            self._cond.notify_all()
        self.on_resume(version)
        return True

    def deliver_async(self, version: int, values: dict, mode: str = "keep") -> threading.Thread:
        thread = threading.Thread(target=self.deliver, args=(version, values, mode), daemon=True)
        thread.start()
        return thread

    def close(self):
        self.closed = True


class FakeHandle:
    def __init__(self, outcome):
        self.outcome = outcome

    def wait(self, timeout=None):
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


class FakeTrainer:
    """wsync.Trainer without a bus: records publishes; `fail_with` makes the next outcome an exception."""

    instances: list[FakeTrainer] = []

    def __init__(self, bus, **options):
        self.bus, self.options = bus, options
        self.published: list[tuple[int, list, dict]] = []
        self.committed_version = 0
        self.fail_with: Exception | None = None
        self.closed = False
        FakeTrainer.instances.append(self)

    def publish(self, version, tensors, **options):
        self.published.append((version, tensors, options))
        if self.fail_with is not None:
            error, self.fail_with = self.fail_with, None
            return FakeHandle(error)
        self.committed_version = version
        return FakeHandle(SimpleNamespace(version=version, kind="committed", committed=True))

    def close(self):
        self.closed = True


class RecordingClient:
    """vLLM's VLLMWeightSyncClient protocol, recording calls (and forwarding them to `target` when given)."""

    def __init__(self, target=None, log=None):
        self.target = target
        self.log = [] if log is None else log

    def init_weight_transfer_engine(self, init_info):
        self.log.append(("init", init_info))
        if self.target is not None:
            self.target.init_weight_transfer_engine(init_info)

    def start_weight_update(self):
        self.log.append(("start",))
        if self.target is not None:
            self.target.start_weight_update()

    def update_weights(self, update_info):
        self.log.append(("update", update_info))
        if self.target is not None:
            self.target.update_weights(update_info)

    def finish_weight_update(self, weight_version=None):
        self.log.append(("finish", weight_version))
        if self.target is not None:
            self.target.finish_weight_update()


class EngineSide:
    """What vLLM's worker does with a client's calls, for one in-process engine (gpu_worker.py's methods)."""

    def __init__(self, engine):
        self.engine = engine

    def init_weight_transfer_engine(self, init_info):
        self.engine.init_transfer_engine(self.engine.parse_init_info(init_info))

    def start_weight_update(self):
        self.engine.start_weight_update()

    def update_weights(self, update_info):
        self.engine.update_weights(update_info)

    def finish_weight_update(self):
        self.engine.finish_weight_update()


class ReceiverSide:
    """The same for a bare StagingReceiver over a stand-in model (no vLLM)."""

    def __init__(self, receiver, model):
        self.receiver, self.model = receiver, model

    def start_weight_update(self):
        pass

    def update_weights(self, update_info):
        self.receiver.load_into(self.model, update_info["version"], update_info["timeout"], keep=True)

    def finish_weight_update(self):
        self.receiver.release()


@pytest.fixture
def fake_wsync(monkeypatch):
    FakeWorker.instances.clear()
    FakeTrainer.instances.clear()
    monkeypatch.setattr(wsync, "Worker", FakeWorker)
    monkeypatch.setattr(wsync, "Trainer", FakeTrainer)
    yield


@pytest.fixture
def cpu_accelerator_sync(monkeypatch):
    """vLLM's update_weights ends with torch.accelerator.synchronize(), which fails on a machine without a GPU
    driver when torch is a CUDA build (vLLM's wheel): there is nothing to synchronize on a CPU model."""
    if not torch.cuda.is_available() and hasattr(torch, "accelerator"):
        monkeypatch.setattr(torch.accelerator, "synchronize", lambda *args, **kwargs: None)


def vllm_stand_in_config():
    """The two attributes WeightTransferEngine.__init__ reads from a VllmConfig."""
    return SimpleNamespace(
        parallel_config=SimpleNamespace(data_parallel_index=0, tensor_parallel_size=1), model_config=None
    )


def create_engine(model):
    from vllm.config import WeightTransferConfig

    wv.register()
    return vllm_factory.WeightTransferEngineFactory.create_engine(
        WeightTransferConfig(backend="wsync"), vllm_stand_in_config(), torch.device("cpu"), model
    )


# ---------------------------------------------------------------------------------------------------------------
# Package
# ---------------------------------------------------------------------------------------------------------------


def test_importing_the_backend_imports_neither_vllm_nor_torch():
    code = (
        "import sys, wsync.vllm as wv; wv.register.__call__; "
        "print(wv.BACKEND, 'vllm' in sys.modules, 'torch' in sys.modules)"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["wsync", "False", "False"]


def test_pause_modes_are_checked():
    assert wv.PAUSE_MODES == ("abort", "wait", "keep")
    for mode in wv.PAUSE_MODES:
        assert wv.check_pause_mode(mode) == mode
    with pytest.raises(ValueError, match="'drain'"):
        wv.check_pause_mode("drain")


def test_manifest_lists_are_checked():
    with pytest.raises(ValueError, match="differ in length"):
        wstaging.manifest_from(["a", "b"], ["float32"], [[1], [2]])
    with pytest.raises(ValueError, match="'a' appears twice"):
        wstaging.manifest_from(["a", "a"], ["float32"] * 2, [[1], [1]])
    with pytest.raises(ValueError, match="empty"):
        wstaging.manifest_from([], [], [])
    assert wstaging.agent_id_from("vllm-{dp}-{rank}", dp=1, rank=3) == "vllm-1-3"
    with pytest.raises(ValueError, match="unknown field"):
        wstaging.agent_id_from("vllm-{tp}")


# ---------------------------------------------------------------------------------------------------------------
# Contract with vLLM's real classes
# ---------------------------------------------------------------------------------------------------------------


def _assert_compatible(base_function, our_function, what: str) -> None:
    """Ours accepts every call the base's signature allows: the same parameters, names, kinds and defaults in
    the same order (annotations aside: ours name the concrete info classes), plus optional ones only."""
    base = list(inspect.signature(base_function).parameters.values())
    ours = list(inspect.signature(our_function).parameters.values())
    shape = [(p.name, p.kind, p.default) for p in base]
    assert [(p.name, p.kind, p.default) for p in ours[: len(base)]] == shape, what
    for extra in ours[len(base) :]:
        assert extra.default is not extra.empty, f"{what}: extra parameter {extra.name} has no default"


@needs_vllm
def test_engines_subclass_vllms_bases_and_are_concrete():
    from wsync.vllm import engine

    assert issubclass(engine.WsyncWeightTransferEngine, vllm_base.WeightTransferEngine)
    assert issubclass(engine.WsyncInitInfo, vllm_base.WeightTransferInitInfo)
    assert issubclass(engine.WsyncUpdateInfo, vllm_base.WeightTransferUpdateInfo)
    assert not inspect.isabstract(engine.WsyncWeightTransferEngine)
    assert engine.WsyncWeightTransferEngine.init_info_cls is engine.WsyncInitInfo
    assert engine.WsyncWeightTransferEngine.update_info_cls is engine.WsyncUpdateInfo
    assert issubclass(engine.WsyncTrainerWeightTransferEngine, vllm_base.TrainerWeightTransferEngine)
    assert issubclass(engine.WsyncTrainerInitInfo, vllm_base.TrainerInitInfo)
    assert engine.WsyncTrainerInitInfo.backend == "wsync"
    assert not inspect.isabstract(engine.WsyncTrainerWeightTransferEngine)


@needs_vllm
def test_every_abstract_method_has_vllms_signature():
    from wsync.vllm import engine

    pairs = [
        (vllm_base.WeightTransferEngine, engine.WsyncWeightTransferEngine),
        (vllm_base.TrainerWeightTransferEngine, engine.WsyncTrainerWeightTransferEngine),
    ]
    for base, ours in pairs:
        assert base.__abstractmethods__, f"{base.__name__} has no abstract methods: the interface changed"
        for name in sorted(base.__abstractmethods__):
            assert name in ours.__dict__, f"{ours.__name__} does not implement {name}"
            _assert_compatible(getattr(base, name), getattr(ours, name), f"{ours.__name__}.{name}")
    # vLLM's factory constructs the worker engine positionally: engine_cls(config, vllm_config, device, model).
    _assert_compatible(vllm_base.WeightTransferEngine.__init__, engine.WsyncWeightTransferEngine.__init__, "__init__")


@needs_vllm
def test_pause_modes_are_vllms():
    from vllm.v1.engine import PauseMode

    assert typing.get_args(PauseMode) == wv.PAUSE_MODES


@needs_vllm
def test_vllms_config_accepts_the_backend():
    from vllm.config import WeightTransferConfig

    assert WeightTransferConfig(backend="wsync").backend == "wsync"


@needs_vllm
@needs_torch
def test_register_makes_vllms_registry_resolve_wsync():
    from wsync.vllm import engine

    created = create_engine(stand_in_model())
    assert type(created) is engine.WsyncWeightTransferEngine
    assert created.receiver is None  # nothing is bound before init_transfer_engine


@needs_vllm
@needs_torch
def test_register_twice_is_harmless(monkeypatch):
    wv.register()
    wv.register()
    # A process whose registry already holds the backend but whose module state is fresh (a re-import, a fork):
    monkeypatch.setattr(wv, "_registered", False)
    wv.register()
    assert isinstance(create_engine(stand_in_model()), vllm_base.WeightTransferEngine)
    with pytest.raises(ValueError, match="already registered"):  # vLLM's own view: the name is taken
        vllm_factory.WeightTransferEngineFactory.register_engine("wsync", "elsewhere", "Other")


@needs_vllm
@needs_torch
def test_vllm_parses_the_senders_dicts():
    created = create_engine(stand_in_model())
    manifest = wsender.manifest_of(trainer_tensors(1.0))
    init_dict = json.loads(json.dumps(wsender.init_info_for("rl", manifest, memory="host", agent_id="v-{rank}")))
    info = created.parse_init_info(init_dict)
    assert (info.bus, info.memory, info.agent_id) == ("rl", "host", "v-{rank}")
    assert info.manifest == manifest
    assert info.manifest[3] == wstaging.TensorSpec("layer.norm.weight", "bfloat16", (HIDDEN,))
    update = created.parse_update_info(json.loads(json.dumps(wsender.update_info_for(7, timeout=5))))
    assert (update.version, update.timeout) == (7, 5.0)
    with pytest.raises(ValueError, match="Invalid init_info"):
        created.parse_init_info({"names": ["a"]})
    with pytest.raises(ValueError, match="version"):
        created.parse_update_info({"version": 0})


def _entry_point():
    for entry in importlib.metadata.entry_points(group="vllm.general_plugins"):
        if entry.name == "wsync":
            return entry
    return None


def test_entry_point_loads_register():
    entry = _entry_point()
    if entry is None:
        pytest.skip("no vllm.general_plugins entry point named wsync: the package is not installed with it")
    assert entry.value == "wsync.vllm:register"
    assert entry.load() is wv.register


@needs_vllm
def test_vllms_plugin_loader_registers_the_backend():
    if _entry_point() is None:
        pytest.skip("no vllm.general_plugins entry point named wsync: the package is not installed with it")
    code = (
        "from vllm.plugins import load_general_plugins\n"
        "load_general_plugins()\n"
        "import wsync.vllm as wv; wv.register()\n"
        "from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory as F\n"
        "try:\n"
        "    F.register_engine('wsync', 'elsewhere', 'Other')\n"
        "except ValueError:\n"
        "    print('registered')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.strip().endswith("registered")


# ---------------------------------------------------------------------------------------------------------------
# Logic, with a stand-in wsync Worker / Trainer
# ---------------------------------------------------------------------------------------------------------------


def make_receiver(**options):
    manifest = wsender.manifest_of(trainer_tensors(0.0))
    receiver = wstaging.StagingReceiver("rl", manifest, agent_id="vllm-test", **options)
    return receiver, FakeWorker.instances[-1]


@needs_torch
def test_staging_tensors_follow_the_manifest_and_load_into_the_model(fake_wsync):
    receiver, worker = make_receiver()
    # vLLM never serves from the staging tensors: a host round lands in them directly, with no staging copy of its own.
    assert worker.options["memory"] == "host_in_place" and worker.options["cuda_device"] is None
    assert [(n, str(t.dtype), tuple(t.shape)) for n, t in worker.tensors.items()] == [
        (s.name, f"torch.{s.dtype}", s.shape) for s in wsender.manifest_of(trainer_tensors(0.0))
    ]
    model = stand_in_model()
    assert worker.deliver(1, trainer_tensors(1.0))
    assert receiver.load_into(model, 1) == 1
    assert_model_holds(model, trainer_tensors(1.0))
    assert model.calls == [list(trainer_tensors(0.0))]  # checkpoint names, in manifest order, in one call
    receiver.close()
    assert worker.closed


@needs_torch
def test_a_round_waits_until_vllm_has_finished_with_the_staging_tensors(fake_wsync):
    receiver, worker = make_receiver()
    model = stand_in_model()
    worker.deliver(1, trainer_tensors(1.0))
    receiver.load_into(model, 1, keep=True)  # as between update_weights and finish_weight_update
    round_2 = worker.deliver_async(2, trainer_tensors(2.0))
    time.sleep(0.3)
    assert round_2.is_alive() and receiver.applied_version == 1
    assert torch.equal(receiver.staged()[0][1], trainer_tensors(1.0)["layer.q_proj.weight"])
    receiver.release()
    round_2.join(5)
    assert not round_2.is_alive() and receiver.applied_version == 2
    receiver.load_into(model, 2)
    assert_model_holds(model, trainer_tensors(2.0))


@needs_torch
def test_a_round_is_refused_when_vllm_holds_the_staging_tensors_too_long(fake_wsync):
    receiver, worker = make_receiver(staging_wait=0.2)
    model = stand_in_model()
    worker.deliver(1, trainer_tensors(1.0))
    receiver.load_into(model, 1, keep=True)
    assert not worker.deliver(2, trainer_tensors(2.0))
    assert "version 1" in worker.refusals[0] and "refused" in worker.refusals[0]
    receiver.release()
    assert worker.deliver(2, trainer_tensors(2.0))


@needs_torch
def test_vllm_waits_while_a_round_writes_the_staging_tensors(fake_wsync):
    receiver, worker = make_receiver()
    model = stand_in_model()
    worker.deliver(1, trainer_tensors(1.0))
    # A round paused the worker (a transfer in progress, or torn Device bindings): version 1 is applied, but
    # the staging tensors are not readable until the resume hook.
    worker.on_pause("abort", 2)
    loaded = []
    loader = threading.Thread(target=lambda: loaded.append(receiver.load_into(model, 1, timeout=10)))
    loader.start()
    time.sleep(0.3)
    assert loader.is_alive() and not model.calls
    worker.on_resume(1)
    loader.join(5)
    assert loaded == [1]


@needs_torch
def test_a_newer_version_is_not_loaded_under_an_older_name(fake_wsync):
    receiver, worker = make_receiver()
    worker.deliver(1, trainer_tensors(1.0))
    worker.deliver(2, trainer_tensors(2.0))
    model = stand_in_model()
    with pytest.raises(ValueError, match="hold version 2, not 1"):
        receiver.load_into(model, 1)
    assert not model.calls
    assert receiver.load_into(model, 2) == 2  # nothing was left held by the refusal


@needs_torch
def test_a_version_that_never_comes_times_out(fake_wsync):
    receiver, _ = make_receiver()
    with pytest.raises(wsync.TimeoutError):
        receiver.load_into(stand_in_model(), 1, timeout=0.2)


@needs_torch
def test_a_failing_load_releases_the_staging_tensors(fake_wsync):
    receiver, worker = make_receiver(staging_wait=0.5)
    worker.deliver(1, trainer_tensors(1.0))

    class Broken:
        def load_weights(self, weights):
            raise KeyError("no such parameter")

    with pytest.raises(KeyError):
        receiver.load_into(Broken(), 1, keep=True)
    assert worker.deliver(2, trainer_tensors(2.0))


@needs_torch
def test_a_cpu_engines_staging_gives_its_pages_back_once_a_version_is_loaded(fake_wsync):
    elements = 1 << 20  # 4 MiB: whole pages inside
    receiver = wstaging.StagingReceiver("rl", [wstaging.TensorSpec("big", "float32", (elements,))], agent_id="v")
    worker = FakeWorker.instances[-1]
    loaded = []

    class Model:
        def load_weights(self, weights):
            loaded.extend(float(tensor.sum()) for _, tensor in weights)

    assert worker.deliver(1, {"big": torch.ones(elements)})
    receiver.load_into(Model(), 1)
    assert loaded == [float(elements)]
    given = receiver.give_back(1)
    assert given >= (elements * 4) - 2 * os.sysconf("SC_PAGE_SIZE")
    # The pages went back to the kernel: they read as zeros now, so version 1 may not be loaded from them again.
    assert float(worker.tensors["big"].sum()) < elements
    with pytest.raises(ValueError, match="given back"):
        receiver.acquire(1)
    assert worker.deliver(2, {"big": torch.full((elements,), 2.0)})
    receiver.load_into(Model(), 2)
    assert loaded[-1] == 2.0 * elements
    receiver.close()


@needs_torch
def test_sender_publishes_first_then_drives_vllms_update(fake_wsync):
    log = []
    sender = wsender.WsyncSender("rl", channel="shm", pause_mode="abort")
    client = RecordingClient(log=log)
    tensors = trainer_tensors(1.0)
    sender.init(client, tensors)
    ((kind, init_info),) = log
    assert kind == "init" and init_info["bus"] == "rl" and init_info["memory"] == "host"
    assert init_info["names"] == list(tensors) and init_info["dtype_names"][3] == "bfloat16"
    log.clear()
    version = sender.sync(
        client, tensors, pause=lambda mode: log.append(("pause", mode)), resume=lambda: log.append(("resume",))
    )
    trainer = FakeTrainer.instances[-1]
    assert version == 1 and trainer.published[0][0] == 1
    assert trainer.published[0][2]["pause_mode"] == "abort"
    assert [name for name, _ in trainer.published[0][1]] == list(tensors)
    assert log == [
        ("pause", "abort"),
        ("start",),
        ("update", {"version": 1, "timeout": wstaging.APPLY_TIMEOUT_S}),
        ("finish", "1"),
        ("resume",),
    ]
    assert sender.sync(client, None) == 2 and trainer.published[1][1] is None


@needs_torch
def test_sender_leaves_vllm_alone_when_the_round_aborts(fake_wsync):
    client = RecordingClient()
    sender = wsender.WsyncSender("rl", channel="nccl")
    assert sender.init_info(trainer_tensors(0.0))["memory"] == "device"
    FakeTrainer.instances[-1].fail_with = wsync.Error("aborted: AgentRefused")
    with pytest.raises(wsync.Error, match="AgentRefused"):
        sender.sync(client, trainer_tensors(1.0))
    assert client.log == []
    with pytest.raises(ValueError):
        wsender.WsyncSender("rl", channel="rdma")


def test_llm_client_wraps_the_request_dicts():
    calls = []
    llm = SimpleNamespace(
        init_weight_transfer_engine=lambda request: calls.append(("init", request)),
        start_weight_update=lambda: calls.append(("start",)),
        update_weights=lambda request: calls.append(("update", request)),
        finish_weight_update=lambda version=None: calls.append(("finish", version)),
    )
    client = wsender.LLMClient(llm)
    client.init_weight_transfer_engine({"bus": "rl"})
    client.start_weight_update()
    client.update_weights({"version": 3})
    client.finish_weight_update(weight_version="3")
    assert calls == [
        ("init", {"init_info": {"bus": "rl"}}),
        ("start",),
        ("update", {"update_info": {"version": 3}}),
        ("finish", "3"),
    ]


@needs_vllm
@needs_torch
def test_vllm_engine_runs_an_update_through_vllms_base_methods(fake_wsync, cpu_accelerator_sync):
    model = stand_in_model()
    engine = create_engine(model)
    manifest = wsender.manifest_of(trainer_tensors(0.0))
    engine.init_transfer_engine(
        engine.parse_init_info(
            wsender.init_info_for("rl", manifest, agent_id="vllm-{dp}-{rank}", layerwise_reload=False)
        )
    )
    worker = FakeWorker.instances[-1]
    assert worker.agent_id == "vllm-0-0" and worker.options["memory"] == "host_in_place"
    worker.deliver(1, trainer_tensors(1.0))
    engine.start_weight_update()
    engine.update_weights(wsender.update_info_for(1))  # vLLM's own: parse, receive_weights, synchronize
    round_2 = worker.deliver_async(2, trainer_tensors(2.0))
    time.sleep(0.2)
    assert round_2.is_alive()  # held until finish_weight_update
    engine.finish_weight_update()
    round_2.join(5)
    assert engine.loaded_version == 1 and worker.applied_version == 2
    assert_model_holds(model, trainer_tensors(1.0))
    engine.shutdown()
    assert worker.closed and engine.receiver is None
    with pytest.raises(RuntimeError, match="not initialized"):
        engine.start_weight_update()


@needs_vllm
@needs_torch
def test_vllm_trainer_factory_builds_the_wsync_trainer_engine(fake_wsync):
    from vllm.distributed.weight_transfer.base import ModuleSource

    from wsync.vllm import engine

    wv.register()
    module = torch.nn.Linear(HIDDEN, 2)
    client = RecordingClient()
    trainer_engine = vllm_factory.WeightTransferTrainerFactory.trainer_init(
        engine.WsyncTrainerInitInfo("rl", rank=0, pause_mode="wait", worker_options={"agent_id": "w-{rank}"}),
        client=client,
        source=ModuleSource(module),
    )
    assert isinstance(trainer_engine, engine.WsyncTrainerWeightTransferEngine)
    ((kind, init_info),) = client.log
    assert init_info["names"] == ["weight", "bias"] and init_info["shapes"] == [[2, HIDDEN], [2]]
    assert init_info["agent_id"] == "w-{rank}" and FakeTrainer.instances[-1].options["agent_id"] == "trainer-0"
    trainer_engine.send_weights()
    published = FakeTrainer.instances[-1].published
    assert [(version, [name for name, _ in tensors]) for version, tensors, _ in published] == [(1, ["weight", "bias"])]
    assert published[0][1][0][1].data_ptr() == module.weight.data_ptr()  # the parameters themselves, no copy
    assert [entry[0] for entry in client.log[1:]] == ["start", "update", "finish"] and client.log[-1][1] == "1"
    # A rank other than 0 iterates the source (FSDP gathers) but has no wsync agent and never calls the client.
    quiet = RecordingClient()
    other = vllm_factory.WeightTransferTrainerFactory.trainer_init(
        engine.WsyncTrainerInitInfo("rl", rank=1), client=quiet, source=ModuleSource(module)
    )
    other.send_weights()
    assert quiet.log == [] and other.sender is None
    trainer_engine.shutdown()
    assert FakeTrainer.instances[0].closed


class NewStyleSource:
    """A trainer source as vLLM 0.33 shapes it (duck-typed, whatever vLLM is installed): `metadata` a property,
    whole tensors from `iter_full()`, which `implements_iter_full()` promises."""

    def __init__(self, module, full: bool = True) -> None:
        self.module = module
        self.full = full

    @property
    def metadata(self):
        return [SimpleNamespace(name=n, dtype=p.dtype, shape=tuple(p.shape)) for n, p in self.module.named_parameters()]

    def implements_iter_full(self) -> bool:
        return self.full

    def iter_full(self):
        return iter(self.module.named_parameters())


class PartialSource:
    """A trainer source as vLLM 0.32 shapes it whose rank holds only part of the model (held_names)."""

    def __init__(self, module) -> None:
        self.module = module

    def metadata(self):
        return [SimpleNamespace(name=n, dtype=p.dtype, shape=tuple(p.shape)) for n, p in self.module.named_parameters()]

    def held_names(self):
        return ["weight"]

    def __iter__(self):
        return iter(self.module.named_parameters())


@needs_vllm
@needs_torch
def test_the_trainer_engine_takes_both_source_shapes_and_refuses_partial_ones(fake_wsync):
    from wsync.vllm import engine

    wv.register()
    module = torch.nn.Linear(HIDDEN, 2)
    client = RecordingClient()
    trainer_engine = vllm_factory.WeightTransferTrainerFactory.trainer_init(
        engine.WsyncTrainerInitInfo("rl", rank=0), client=client, source=NewStyleSource(module)
    )
    assert client.log[0][1]["names"] == ["weight", "bias"]
    trainer_engine.send_weights()
    assert [name for name, _ in FakeTrainer.instances[-1].published[0][1]] == ["weight", "bias"]
    trainer_engine.shutdown()
    with pytest.raises(TypeError, match="iter_full"):
        engine.WsyncTrainerWeightTransferEngine.trainer_init(
            engine.WsyncTrainerInitInfo("rl", rank=0), client=RecordingClient(), source=NewStyleSource(module, False)
        )
    with pytest.raises(TypeError, match="'bias'"):
        engine.WsyncTrainerWeightTransferEngine.trainer_init(
            engine.WsyncTrainerInitInfo("rl", rank=0), client=RecordingClient(), source=PartialSource(module)
        )


@needs_vllm
def test_register_refuses_a_trainer_side_of_another_shape_with_a_warning(monkeypatch, caplog):
    class OtherTrainerEngine(vllm_base.TrainerWeightTransferEngine):
        def __init__(self, *, client, source=None, world=None) -> None:
            pass

    monkeypatch.setattr(vllm_base, "TrainerWeightTransferEngine", OtherTrainerEngine)
    problem = wv._trainer_incompatibility()
    assert problem is not None and "world" in problem
    with caplog.at_level("WARNING", logger="wsync.vllm"):
        assert not wv._trainer_interface_matches()
    assert "trainer-side backend 'wsync' not registered" in caplog.text and "world" in caplog.text


# ---------------------------------------------------------------------------------------------------------------
# Data path: real wsync rounds (native library, coordinator program) into a stand-in model
# ---------------------------------------------------------------------------------------------------------------


def _native_missing() -> str | None:
    try:
        wsync.native_version()  # loads libwsync.so ($WSYNC_LIBRARY, else the package's own)
    except Exception as error:  # noqa: BLE001 - any failure to load it skips
        return f"the native library is not loadable: {type(error).__name__}: {error}"
    return None


NATIVE_MISSING = _native_missing()
needs_native = pytest.mark.skipif(NATIVE_MISSING is not None, reason=NATIVE_MISSING or "")


@pytest.fixture
def wsync_bus():
    """A coordinator (the shipped program) on a bus of this test's own; yields the bus's name."""
    name = f"vllm-{os.getpid()}-{next(_bus_numbers)}"
    with wsync.Coordinator(name) as coordinator:
        yield coordinator.bus


@needs_torch
@needs_native
def test_real_rounds_reach_a_stand_in_model_through_load_weights(wsync_bus):
    bus = wsync_bus
    model = stand_in_model()
    manifest = wsender.manifest_of(trainer_tensors(0.0))
    with wstaging.StagingReceiver(bus, manifest, agent_id="vllm-0") as receiver, wsender.WsyncSender(bus) as sender:
        client = RecordingClient(target=ReceiverSide(receiver, model))
        for version, seed in ((1, 1.0), (2, 2.5)):
            tensors = trainer_tensors(seed)
            assert sender.sync(client, tensors) == version
            assert_model_holds(model, tensors)
            assert receiver.applied_version == version
        assert client.log[-1] == ("finish", "2")
        assert receiver.worker.counters.rounds_applied == 2


@needs_torch
@needs_native
def test_a_real_round_is_aborted_while_vllm_holds_the_staging_tensors(wsync_bus):
    bus = wsync_bus
    model = stand_in_model()
    manifest = wsender.manifest_of(trainer_tensors(0.0))
    with (
        wstaging.StagingReceiver(bus, manifest, agent_id="vllm-0", staging_wait=0.5) as receiver,
        wsender.WsyncSender(bus) as sender,
    ):
        client = RecordingClient(target=ReceiverSide(receiver, model))
        sender.sync(client, trainer_tensors(1.0))
        receiver.acquire(1)  # an update between update_weights and finish_weight_update
        with pytest.raises(wsync.AbortedError) as aborted:
            sender.publish(trainer_tensors(2.0))
        assert aborted.value.reason == "AgentRefused"
        receiver.release()
        assert receiver.applied_version == 1
        assert_model_holds(model, trainer_tensors(1.0))
        assert sender.sync(client, trainer_tensors(3.0)) == 3
        assert_model_holds(model, trainer_tensors(3.0))


@needs_torch
@needs_native
def test_a_round_that_times_out_while_vllm_holds_the_staging_tensors_ends_the_wait_at_once(capfd):
    """The coordinator's pause timeout (0.5 s) ends the round long before the receiver's staging wait (20 s): the
    pause is withdrawn, so the worker stops waiting while vLLM still holds the tensors, counts no refusal, and takes
    the next round once vLLM lets go."""
    bus = f"vllm-{os.getpid()}-{next(_bus_numbers)}"
    model = stand_in_model()
    manifest = wsender.manifest_of(trainer_tensors(0.0))
    with (
        wsync.Coordinator(bus, pause_timeout=0.5),
        wstaging.StagingReceiver(bus, manifest, agent_id="vllm-0") as receiver,
        wsender.WsyncSender(bus) as sender,
    ):
        client = RecordingClient(target=ReceiverSide(receiver, model))
        sender.sync(client, trainer_tensors(1.0))
        receiver.acquire(1)
        started = time.monotonic()
        with pytest.raises(wsync.AbortedError) as aborted:
            sender.publish(trainer_tensors(2.0))
        assert aborted.value.reason == "Timeout", aborted.value
        log = []
        withdrawn = "the bus withdrew the pause for round 2 while the engine quiesced: generation goes on"
        deadline = time.monotonic() + 10
        while not any(withdrawn in text for text in log) and time.monotonic() < deadline:
            log.append(capfd.readouterr().err)
            time.sleep(0.05)
        assert any(withdrawn in text for text in log), "".join(log)
        assert time.monotonic() - started < wstaging.STAGING_WAIT_S  # vLLM still holds the staging tensors
        receiver.release()
        assert sender.sync(client, trainer_tensors(3.0)) == 3
        assert receiver.worker.counters.rounds_refused == 0
        assert_model_holds(model, trainer_tensors(3.0))


@needs_vllm
@needs_torch
@needs_native
def test_real_rounds_through_vllms_engine_class(wsync_bus, cpu_accelerator_sync):
    bus = wsync_bus
    model = stand_in_model()
    engine = create_engine(model)
    with wsender.WsyncSender(bus, layerwise_reload=False) as sender:
        client = RecordingClient(target=EngineSide(engine))
        sender.init(client, trainer_tensors(0.0))
        try:
            for seed in (1.0, 2.0):
                sender.sync(client, trainer_tensors(seed))
                assert_model_holds(model, trainer_tensors(seed))
            assert engine.loaded_version == 2
        finally:
            engine.shutdown()
