"""The package's surface in one process (an in-process coordinator, agents in threads of the test): timeouts,
events and status, coordinators, asyncio callbacks, the pause gate, what tensors are refused and why, the fast
path, references kept alive, spans."""

from __future__ import annotations

import array
import asyncio
import builtins
import ctypes
import gc
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import wait_until

import wsync
from wsync import _native, _tensors


def test_wait_for_version_times_out(in_process_coordinator):
    with wsync.Worker(in_process_coordinator.bus, agent_id="w", tensors={"x": np.zeros(4, np.float32)}) as worker:
        assert worker.applied_version == 0 and worker.committed_version == 0
        assert worker.rank >= 0
        started = time.monotonic()
        with pytest.raises(wsync.TimeoutError) as timed_out:
            worker.wait_for_version(5, timeout=0.3)
        elapsed = time.monotonic() - started
        assert 0.25 <= elapsed < 2.0
        assert isinstance(timed_out.value, builtins.TimeoutError)
        assert timed_out.value.status == "timeout"
        assert worker.wait_for_version(0, timeout=0) == 0
        assert worker.counters == wsync.Counters(0, 0, 0, 0)
    with pytest.raises(wsync.StoppedError):
        _ = worker.applied_version


def test_publish_wait_times_out_polls_and_refuses_a_second_version_in_flight(in_process_coordinator):
    bus = in_process_coordinator.bus
    release = threading.Event()
    target = np.zeros(8, np.float32)
    with (
        wsync.Worker(bus, agent_id="w", tensors={"x": target}, on_pause=lambda mode, round_: release.wait(30)),
        wsync.Trainer(bus, agent_id="t") as trainer,
    ):
        source = np.arange(8, dtype=np.float32)
        handle = trainer.publish(1, {"x": source})
        with pytest.raises(wsync.TimeoutError):
            handle.wait(timeout=0.2)
        assert not handle.done() and handle.outcome is None
        with pytest.raises(wsync.BusyError):
            trainer.publish(2)
        release.set()
        outcome = handle.wait(timeout=30)
        assert outcome.committed and outcome.until_plan > 0.1  # the pause waited for the engine
        assert handle.wait() is outcome  # settled: returns at once
        wait_until(lambda: target[7] == 7, what="version 1 applied")
        progress = trainer.progress()
        assert isinstance(progress, wsync.Progress) and progress.bytes_sent <= progress.bytes_total


def test_events_and_status(in_process_coordinator):
    bus = in_process_coordinator.bus
    with wsync.events(bus, timeout=10) as stream:
        stream.next_event(timeout=10)  # the subscription is live (a heartbeat event arrives every 100 ms)
        with (
            wsync.Worker(bus, agent_id="w", tensors={"x": np.zeros(16, np.uint8)}),
            wsync.Trainer(bus, agent_id="t") as trainer,
        ):
            assert trainer.publish(7, {"x": np.full(16, 3, np.uint8)}, label="step-7").wait(30).committed
            seen = []
            for event in stream:
                seen.append(event)
                if event.get("type") == "Commit":
                    break
            commit = seen[-1]
            assert commit["version"] == 7 and commit.get("label") == "step-7"
            assert all("topic" in event and "seq" in event for event in seen)
            state = wsync.status(bus)
            assert state["committed_version"] == 7
            ids = {entry["agent_id"]: entry for entry in state["agents"]}
            assert set(ids) >= {"w", "t"}
            assert ids["w"]["applied_version"] == 7
        with pytest.raises(wsync.TimeoutError):
            for _event in wsync.events(bus, timeout=0.05):
                pass  # a beat may come first; the stream's timeout is per event
    assert in_process_coordinator.committed_version == 7


def test_status_without_a_coordinator_times_out(bus):
    started = time.monotonic()
    with pytest.raises((wsync.TimeoutError, wsync.UnavailableError)) as unanswered:
        wsync.status(bus, timeout=0.5)
    assert time.monotonic() - started < 5
    assert bus in str(unanswered.value)


def test_a_second_coordinator_on_a_bus_is_refused(bus):
    with wsync.Coordinator(bus) as program:
        assert program.running and program.pid != 0
        with pytest.raises(wsync.UnavailableError):
            wsync.Coordinator(bus, in_process=True)
        with pytest.raises(wsync.UnavailableError) as second:
            wsync.Coordinator(bus)
        assert "live coordinator" in str(second.value)
        assert wsync.status(bus)["committed_version"] == 0
    assert not program.running
    program.stop()  # idempotent
    with wsync.Coordinator(bus, in_process=True) as in_process:  # the bus is free again
        assert in_process.running
        with pytest.raises(wsync.UnavailableError):
            wsync.Coordinator(bus)


def test_program_options_in_whole_mib(bus):
    with pytest.raises(wsync.InvalidArgumentError):
        wsync.Coordinator(bus, bucket_bytes=1000)
    with wsync.Coordinator(bus, bucket_bytes=2 << 20, buffer_count=3, transfer_timeout=30) as program:
        assert "--bucket-mib" in program.command and "2" in program.command


def test_asyncio_callbacks_run_on_the_loop(in_process_coordinator):
    bus = in_process_coordinator.bus
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, daemon=True)
    loop_thread.start()
    calls = []

    async def on_pause(mode, round_):
        await asyncio.sleep(0.01)
        calls.append(("pause", mode, threading.current_thread() is loop_thread))
        if len([call for call in calls if call[0] == "pause"]) == 2:
            raise RuntimeError("async engine says no")

    async def on_resume(version):
        calls.append(("resume", version, threading.current_thread() is loop_thread))

    target = np.zeros(4, np.int32)
    try:
        with (
            wsync.Worker(
                bus, agent_id="w", tensors={"x": target}, on_pause=on_pause, on_resume=on_resume, loop=loop
            ) as worker,
            wsync.Trainer(bus, agent_id="t") as trainer,
        ):
            assert trainer.publish(1, {"x": np.ones(4, np.int32)}, pause_mode="wait").wait(30).committed
            with pytest.raises(wsync.AbortedError) as aborted:
                trainer.publish(2).wait(30)
            assert aborted.value.reason == "AgentRefused"
            assert "async engine says no" in aborted.value.outcome.detail
            assert isinstance(worker.last_pause_error, RuntimeError)
            assert trainer.publish(3).wait(30).committed
            applied = asyncio.run_coroutine_threadsafe(worker.wait_for_version_async(3, timeout=10), loop)
            assert applied.result(15) == 3
            wait_until(lambda: ("resume", 3, True) in calls, what="the resume of version 3")
        assert ("pause", "wait", True) in calls and ("pause", "keep", True) in calls
        assert all(on_loop for _, _, on_loop in calls)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join(5)
        loop.close()


def test_a_coroutine_callback_without_a_loop_refuses_the_pause(in_process_coordinator):
    bus = in_process_coordinator.bus

    async def on_pause(mode, round_):
        return None

    with (
        wsync.Worker(bus, agent_id="w", tensors={"x": np.zeros(2)}, on_pause=on_pause),
        wsync.Trainer(bus, agent_id="t") as trainer,
    ):
        with pytest.raises(wsync.AbortedError) as aborted:
            trainer.publish(1, {"x": np.ones(2)}).wait(30)
        assert "loop=" in aborted.value.outcome.detail


def test_pause_gate_parks_a_step_loop_engine(in_process_coordinator):
    bus = in_process_coordinator.bus
    gate = wsync.PauseGate()
    weights = np.zeros(1024, np.float32)
    parks, outputs = [], []
    stop = threading.Event()
    worker_box = {}

    def engine():
        while not stop.is_set():
            spans = wsync.SpanRecorder()
            for token in range(20):
                mode = gate.requested
                if mode is not None:
                    parks.append(mode)
                    if not gate.park():
                        return
                worker = worker_box.get("worker")
                version = worker.applied_version if worker else 0
                assert weights[0] == version  # every token reads whole versions
                spans.record(token, version)
                time.sleep(0.001)
            outputs.append(spans.spans)

    thread = threading.Thread(target=engine, daemon=True)
    thread.start()
    try:
        with (
            wsync.Worker(
                bus, agent_id="w", tensors={"weights": weights}, on_pause=gate.pause, on_resume=gate.resume
            ) as worker,
            wsync.Trainer(bus, agent_id="t") as trainer,
        ):
            worker_box["worker"] = worker
            source = np.zeros(1024, np.float32)
            for version in (1, 2, 3):
                source[:] = version
                assert trainer.publish(version, {"weights": source} if version == 1 else None).wait(30).committed
            worker.wait_for_version(3, timeout=10)
            wait_until(lambda: any(spans[-1][1] == 3 for spans in outputs), what="an output at version 3")
            stop.set()  # the engine stops before its worker closes
            thread.join(5)
        assert parks.count("keep") == 3
    finally:
        stop.set()
        gate.close()
        thread.join(5)
    assert not thread.is_alive()
    for spans in outputs:
        wsync.check_spans(spans, token_count=20)
    assert any(len(spans) > 1 for spans in outputs) or len(outputs) > 3


def test_a_pause_the_round_outlives_is_withdrawn_from_a_draining_engine(bus):
    """A round aborted (here by its pause timeout) while the engine drains its requests in "wait" mode: with
    on_withdraw=gate.withdraw the engine goes back to generating at once, the worker counts no refusal and resumes
    nothing, and the next round commits."""
    gate = wsync.PauseGate()
    weights = np.zeros(256, np.float32)
    seen = {"drain": 0, "generated": 0, "parks": []}
    stop = threading.Event()

    def engine():  # one request that never ends: a "wait" pause can only be withdrawn
        while not stop.is_set():
            mode = gate.requested
            if mode == "wait":
                seen["drain"] += 1
            elif mode is not None:
                seen["parks"].append(mode)
                if not gate.park():
                    return
            else:
                seen["generated"] += 1
            time.sleep(0.001)

    thread = threading.Thread(target=engine, daemon=True)
    thread.start()
    try:
        with (
            wsync.Coordinator(bus, in_process=True, heartbeat_interval=0.1, heartbeat_timeout=1.0, pause_timeout=0.5),
            wsync.Worker(
                bus,
                agent_id="w",
                tensors={"weights": weights},
                on_pause=gate.pause,
                on_resume=gate.resume,
                on_withdraw=gate.withdraw,
            ) as worker,
            wsync.Trainer(bus, agent_id="t") as trainer,
        ):
            source = np.full(256, 1, np.float32)
            with pytest.raises(wsync.AbortedError) as aborted:
                trainer.publish(1, {"weights": source}, pause_mode="wait").wait(30)
            assert aborted.value.reason == "Timeout", aborted.value
            wait_until(lambda: gate.requested is None, what="the pause withdrawn")
            assert seen["drain"] > 0 and not seen["parks"]
            generated = seen["generated"]
            wait_until(lambda: seen["generated"] > generated + 10, what="generation after the withdrawal")
            counters = worker.counters
            assert counters.rounds_refused == 0 and worker.last_pause_error is None, counters
            assert worker.callback_errors == 0

            source[:] = 2
            assert trainer.publish(2, {"weights": source}).wait(30).committed
            worker.wait_for_version(2, timeout=10)
            assert seen["parks"] == ["keep"]
            assert float(weights[0]) == 2.0
            stop.set()
            thread.join(5)
    finally:
        stop.set()
        gate.close()
        thread.join(5)


def test_pause_gate_withdraw_before_and_after_the_park():
    gate = wsync.PauseGate()
    gate.withdraw()  # nothing requested: nothing happens
    assert gate.requested is None
    errors = []

    def pause(mode):
        try:
            gate.pause(mode, round=7)
        except wsync.PauseWithdrawn as withdrawn:
            errors.append(str(withdrawn))

    pausing = threading.Thread(target=pause, args=("wait",))
    pausing.start()
    wait_until(lambda: gate.requested == "wait", what="the request")
    gate.withdraw(7)
    pausing.join(5)
    assert errors == ["the pause for round 7 was withdrawn before the engine quiesced"]
    assert gate.park() is True  # the engine read the request before the withdrawal: nothing to park for
    assert not gate.parked

    pausing = threading.Thread(target=pause, args=("keep",))
    pausing.start()
    wait_until(lambda: gate.requested == "keep", what="the request")
    parked = []
    engine = threading.Thread(target=lambda: parked.append(gate.park()))
    engine.start()
    pausing.join(5)
    assert gate.parked and len(errors) == 1
    gate.withdraw(8)  # parked: the worker resumes it as usual
    assert gate.parked
    gate.resume()
    engine.join(5)
    assert parked == [True]


def test_callbacks_that_raise_outside_pause_are_counted_not_fatal(in_process_coordinator):
    bus = in_process_coordinator.bus

    def bad(*args):
        raise ValueError("not today")

    target = np.zeros(3, np.float64)
    with (
        wsync.Worker(bus, agent_id="w", tensors={"x": target}, on_resume=bad, on_applied=bad) as worker,
        wsync.Trainer(bus, agent_id="t") as trainer,
    ):
        for version in (1, 2):
            assert trainer.publish(version, {"x": np.full(3, version, np.float64)}).wait(30).committed
        worker.wait_for_version(2, timeout=10)
        wait_until(lambda: worker.callback_errors >= 3, what="the failing callbacks")
    assert (target == 2).all()


# --- tensors ---------------------------------------------------------------------------------------------------
def test_closing_or_waiting_from_a_workers_own_callbacks_raises_and_the_worker_goes_on(bus):
    """close() and wait_for_version() from each callback, on_withdraw's thread included (the agent's pause watch,
    which the I/O thread joins: the C API's destroy from there used to hang, and from the I/O thread to end the
    process), raise InvalidArgumentError and change nothing: the next round commits, and close() from this thread
    works."""
    refused = []
    box = {}
    withdrawn = threading.Event()

    def try_forbidden(callback):
        worker = box["worker"]
        for call, attempt in (("close", worker.close), ("wait", lambda: worker.wait_for_version(99, timeout=5))):
            try:
                attempt()
                refused.append((callback, call, "returned"))
            except wsync.InvalidArgumentError as error:
                refused.append((callback, call, str(error)))

    def on_pause(mode, round_):
        try_forbidden("on_pause")
        if round_ == 1:  # held until the pause timeout aborts the round and the bus withdraws the pause
            if not withdrawn.wait(30):
                raise RuntimeError("never withdrawn")
            raise wsync.PauseWithdrawn()

    def on_withdraw(round_):
        try_forbidden("on_withdraw")
        withdrawn.set()

    target = np.zeros(4, np.float32)
    with (
        wsync.Coordinator(bus, in_process=True, heartbeat_interval=0.1, heartbeat_timeout=1.0, pause_timeout=0.5),
        wsync.Worker(
            bus,
            agent_id="w",
            tensors={"x": target},
            on_pause=on_pause,
            on_withdraw=on_withdraw,
            on_applied=lambda version, round_: try_forbidden("on_applied"),
            on_resume=lambda version: try_forbidden("on_resume"),
        ) as worker,
        wsync.Trainer(bus, agent_id="t") as trainer,
    ):
        box["worker"] = worker
        with pytest.raises(wsync.AbortedError):
            trainer.publish(1, {"x": np.full(4, 1, np.float32)}).wait(30)
        # Before the next round: a pause word held again for it before the watch saw the word clear keeps the
        # watched pause, and nothing is withdrawn.
        assert withdrawn.wait(10)
        assert trainer.publish(2, {"x": np.full(4, 2, np.float32)}).wait(30).committed
        assert worker.wait_for_version(2, timeout=10) == 2
        wait_until(lambda: len(refused) >= 10, what="every callback's attempts")
        assert (target == 2).all() and worker.callback_errors == 0
    assert [(callback, call) for callback, call, _ in refused] == [
        (callback, call)
        for callback in ("on_pause", "on_withdraw", "on_pause", "on_applied", "on_resume")
        for call in ("close", "wait")
    ]
    for callback, call, text in refused:
        if callback == "on_withdraw":  # another thread than the I/O thread's: the C API refuses
            function = "wsync_worker_destroy" if call == "close" else "wsync_worker_wait_for_version"
            assert f"{function} from the worker's own withdraw callback" in text, text
        else:
            assert "would wait on itself" in text, text


def test_tensors_are_refused_by_name(in_process_coordinator):
    bus = in_process_coordinator.bus
    cases = {
        "strided": np.zeros((4, 4), np.float32)[:, ::2],
        "complex": np.zeros(3, np.complex64),
        "bigendian": np.zeros(3, ">f4"),
        "text": "not a tensor",
        "readonly": b"bytes are read-only",
    }
    for name, value in cases.items():
        with pytest.raises(wsync.InvalidArgumentError) as refused:
            wsync.Worker(bus, agent_id="w", tensors={name: value})
        assert f"'{name}'" in str(refused.value), refused.value
    frozen = np.zeros(3, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(wsync.InvalidArgumentError, match="'frozen' is read-only"):
        wsync.Worker(bus, agent_id="w", tensors={"frozen": frozen})
    with pytest.raises(wsync.InvalidArgumentError, match="twice"):
        wsync.Worker(bus, agent_id="w", tensors=[("a", np.zeros(1)), ("a", np.zeros(1))])
    with wsync.Trainer(bus, agent_id="t") as trainer:
        for name, value in cases.items():
            if name == "readonly":
                continue
            with pytest.raises(wsync.InvalidArgumentError) as refused:
                trainer.publish(1, {name: value})
            assert f"'{name}'" in str(refused.value)
        with pytest.raises(wsync.InvalidArgumentError, match="pause_mode"):
            trainer.publish(1, {"x": np.zeros(1)}, pause_mode="sometimes")
        with pytest.raises(wsync.InvalidArgumentError, match="previous publish"):
            trainer.publish(1)


def test_overlapping_tensors_are_refused_naming_both(in_process_coordinator):
    """Two names over shared bytes would each be written with a version's bytes, one over the other's, while the round
    reports both applied: {"a": x[:4], "b": x[:4]} is refused naming both, and so is memory another live Worker of
    this process bound, until that one closes. Views that only touch, and empty ones, are fine."""
    bus = in_process_coordinator.bus
    x = np.zeros(8, np.float32)
    with pytest.raises(wsync.InvalidArgumentError) as refused:
        wsync.Worker(bus, agent_id="w", tensors={"a": x[:4], "b": x[:4]})
    message = str(refused.value)
    assert "tensor 'b': memory [0x" in message and "overlaps that of tensor 'a'" in message, message
    with pytest.raises(wsync.InvalidArgumentError, match="tensor 'b': memory .* overlaps that of tensor 'a'"):
        wsync.Worker(bus, agent_id="w", tensors={"a": x[:4], "b": x[2:6]})

    with wsync.Worker(bus, agent_id="w", tensors={"a": x[:4], "b": x[4:], "empty": x[4:4]}):
        with pytest.raises(wsync.InvalidArgumentError) as taken:
            wsync.Worker(bus, agent_id="w2", tensors={"c": x[3:5]})
        message = str(taken.value)
        assert "tensor 'c': memory [0x" in message and "bound by worker 'w' of this process" in message, message
        assert "overlaps that of tensor 'a'" in message or "overlaps that of tensor 'b'" in message, message
    with wsync.Worker(bus, agent_id="w2", tensors={"c": x[3:5]}) as worker:  # released when 'w' closed
        assert worker.applied_version == 0


def test_torch_tensors_refused_by_name():
    torch = pytest.importorskip("torch")
    cases = {
        "transposed": torch.zeros(3, 4).t(),
        "complex": torch.zeros(2, dtype=torch.complex64),
        "meta": torch.zeros(2, device="meta"),
        "sparse": torch.zeros(2, 2).to_sparse(),
    }
    for name, value in cases.items():
        with pytest.raises(wsync.InvalidArgumentError) as refused:
            _tensors.describe(name, value)
        assert f"'{name}'" in str(refused.value)
    bf16 = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)[1]
    info = _tensors.describe("row", bf16)  # a contiguous view: its own offset, no copy
    assert (info.dtype, info.shape, info.data, info.nbytes) == (_native.DTYPE_BF16, (3,), bf16.data_ptr(), 6)


class _Capsule:
    """A DLPack producer written with ctypes alone: the parser must not care who made the capsule."""

    def __init__(self, code, bits, shape, device_type=1, device_id=0, strides=None, lanes=1):
        self.buffer = (ctypes.c_uint8 * 64)()
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = (ctypes.c_int64 * len(shape))(*strides) if strides else None
        managed = _tensors._DLManagedTensor()
        tensor = managed.dl_tensor
        tensor.data = ctypes.addressof(self.buffer)
        tensor.device.device_type, tensor.device.device_id = device_type, device_id
        tensor.ndim = len(shape)
        tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes = code, bits, lanes
        tensor.shape = self.shape
        if self.strides is not None:
            tensor.strides = self.strides
        tensor.byte_offset = 8
        self.managed = managed

    def __dlpack__(self, stream=None):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self.managed), b"dltensor", None)


def test_dlpack_capsules_are_read_with_ctypes(in_process_coordinator):
    e4m3 = _tensors.describe("f8", _Capsule(10, 8, (4, 2)))
    assert (e4m3.dtype, e4m3.shape, e4m3.nbytes, e4m3.device) == (_native.DTYPE_F8_E4M3, (4, 2), 8, ("cpu", -1))
    assert e4m3.data == ctypes.addressof(e4m3.obj.buffer) + 8
    assert _tensors.describe("f8b", _Capsule(12, 8, (3,))).dtype == _native.DTYPE_F8_E5M2
    assert _tensors.describe("bf", _Capsule(4, 16, (2,))).dtype == _native.DTYPE_BF16
    assert _tensors.describe("dense", _Capsule(2, 32, (2, 3), strides=(3, 1))).nbytes == 24
    with pytest.raises(wsync.InvalidArgumentError, match="'cols' is not contiguous"):
        _tensors.describe("cols", _Capsule(2, 32, (2, 3), strides=(1, 2)))
    with pytest.raises(wsync.InvalidArgumentError, match="'vec'"):
        _tensors.describe("vec", _Capsule(2, 32, (2,), lanes=4))
    with pytest.raises(wsync.InvalidArgumentError, match="'c64'"):
        _tensors.describe("c64", _Capsule(5, 64, (2,)))
    gpu = _tensors.describe("gpu", _Capsule(2, 16, (2,), device_type=2, device_id=1))
    assert gpu.device == ("cuda", 1)
    with wsync.Trainer(in_process_coordinator.bus, agent_id="t") as trainer:
        with pytest.raises(wsync.InvalidArgumentError, match="'gpu' is on cuda:1; the shm channel takes host"):
            trainer.publish(1, {"gpu": _Capsule(2, 16, (2,), device_type=2, device_id=1)})


def test_buffers_and_dlpack_move_without_numpy_or_torch(in_process_coordinator):
    bus = in_process_coordinator.bus
    target = array.array("f", [0.0] * 8)
    raw = bytearray(5)
    with (
        wsync.Worker(bus, agent_id="w", tensors={"floats": target, "raw": raw}),
        wsync.Trainer(bus, agent_id="t") as trainer,
    ):
        source = array.array("f", [float(i) for i in range(8)])
        assert trainer.publish(1, {"floats": source, "raw": bytearray(b"hello")}).wait(30).committed
        wait_until(lambda: bytes(raw) == b"hello", what="the buffers applied")
    assert list(target) == [float(i) for i in range(8)]


def test_the_tcp_channel_moves_host_tensors(in_process_coordinator):
    bus = in_process_coordinator.bus
    target = np.zeros(1 << 20, np.float32)
    with (
        wsync.Worker(bus, agent_id="w", tensors={"x": target}) as worker,
        wsync.Trainer(bus, agent_id="t", channel="tcp") as trainer,
    ):
        for version in (1, 2):
            assert trainer.publish(version, {"x": np.full(1 << 20, version, np.float32)}).wait(30).committed
            worker.wait_for_version(version, timeout=10)
            assert (target == version).all()


def test_published_tensors_stay_alive_until_the_outcome(in_process_coordinator):
    bus = in_process_coordinator.bus
    target = np.zeros(1 << 16, np.int64)
    with wsync.Worker(bus, agent_id="w", tensors={"x": target}) as worker, wsync.Trainer(bus, agent_id="t") as trainer:
        handle = trainer.publish(1, {"x": np.arange(1 << 16, dtype=np.int64)})  # no other reference to it
        gc.collect()
        assert handle.wait(30).committed
        worker.wait_for_version(1, timeout=10)
    assert (target == np.arange(1 << 16)).all()


def test_the_fast_path_does_no_per_tensor_work(in_process_coordinator, monkeypatch):
    bus = in_process_coordinator.bus
    count = 18867  # qwen3-30b-a3b's tensor count
    sources = {f"t{i}": np.full(2, i, np.float32) for i in range(count)}
    targets = {f"t{i}": np.zeros(2, np.float32) for i in range(count)}
    with (
        wsync.Worker(bus, agent_id="w", tensors=targets, registration_timeout=60) as worker,
        wsync.Trainer(bus, agent_id="t") as trainer,
    ):
        started = time.perf_counter()
        first = trainer.publish(1, sources)
        declare_seconds = time.perf_counter() - started
        assert first.wait(60).committed

        def no_per_tensor_work(*args, **kwargs):
            raise AssertionError("publish(version, None) converted a tensor")

        monkeypatch.setattr(wsync.trainer, "describe", no_per_tensor_work)
        for array_ in sources.values():
            array_ += 1
        started = time.perf_counter()
        second = trainer.publish(2)
        fast_seconds = time.perf_counter() - started
        assert second.wait(60).committed
        worker.wait_for_version(2, timeout=30)
    assert targets["t18866"][0] == 18867 and targets["t0"][0] == 1
    print(
        f"\npublish of {count} tensors: first (declare) {declare_seconds * 1e3:.1f} ms, "
        f"fast path {fast_seconds * 1e3:.2f} ms"
    )
    assert fast_seconds < declare_seconds


def test_the_fast_path_publishes_the_tensors_given_last_as_they_are_now(in_process_coordinator):
    bus = in_process_coordinator.bus
    first, second = {"x": np.full(4, 1, np.int32)}, {"x": np.full(4, 2, np.int32)}
    target = np.zeros(4, np.int32)
    with wsync.Worker(bus, agent_id="w", tensors={"x": target}) as worker, wsync.Trainer(bus, agent_id="t") as trainer:
        assert trainer.publish(1, first).wait(30).committed
        assert trainer.publish(2, second).wait(30).committed
        with pytest.raises(wsync.ManifestMismatchError):
            trainer.publish(3, {"x": np.zeros(5, np.int32)})  # refused: the agent keeps the second's memory
        first["x"] += 100
        second["x"] += 5
        assert trainer.publish(3).wait(30).committed
        worker.wait_for_version(3, timeout=10)
        assert (target == 7).all()


# --- spans and errors ------------------------------------------------------------------------------------------
def test_span_recorder_and_check_spans():
    spans = wsync.SpanRecorder()
    for token, version in [(0, 1), (1, 1), (2, 2), (3, 2), (4, 4)]:
        spans.record(token, version)
    assert spans.spans == [(0, 1), (2, 2), (4, 4)]
    wsync.check_spans(spans, token_count=5)
    wsync.check_spans([])
    for bad, text in [
        ([(1, 1)], "token 0"),
        ([(0, 2), (3, 1)], "versions decrease"),
        ([(0, 1), (0, 2)], "not increasing"),
        ([(0, 1), (5, 2)], "past the last token"),
    ]:
        with pytest.raises(ValueError, match=text):
            wsync.check_spans(bad, token_count=5)
    spans.clear()
    assert spans.spans == []


def test_error_classes_carry_status_and_detail():
    for status, cls in wsync.errors._BY_STATUS.items():
        error = wsync.errors.error_for_status(status, "why", _native.status_name(status))
        assert isinstance(error, cls) and isinstance(error, wsync.Error)
        assert error.detail == "why" and error.status == _native.status_name(status)
    mismatch = wsync.errors.error_for_status(_native.MANIFEST_MISMATCH, "tensor 'x.y': shape [2], bound [3]")
    assert mismatch.tensor == "x.y"
    assert issubclass(wsync.TimeoutError, builtins.TimeoutError)
    assert issubclass(wsync.UnavailableError, ConnectionError)
    assert issubclass(wsync.ManifestMismatchError, ValueError)


def test_outcome_kind_is_an_enum_that_compares_as_its_name(in_process_coordinator):
    bus = in_process_coordinator.bus
    with (
        wsync.Worker(bus, agent_id="w", tensors={"x": np.zeros(4, np.uint8)}),
        wsync.Trainer(bus, agent_id="t") as trainer,
    ):
        outcome = trainer.publish(1, {"x": np.ones(4, np.uint8)}).wait(30)
        assert outcome.kind is wsync.OutcomeKind.COMMITTED and outcome.committed
        assert outcome.kind == "committed" and str(outcome.kind) == "committed" and f"{outcome.kind}" == "committed"
        assert json.dumps({"kind": outcome.kind}) == '{"kind": "committed"}'
        with pytest.raises(wsync.RefusedError) as refused:
            trainer.publish(1).wait(30)
        assert refused.value.outcome.kind is wsync.OutcomeKind.REFUSED and not refused.value.outcome.committed
    assert [kind.value for kind in wsync.OutcomeKind] == ["committed", "aborted", "refused"]


def test_one_connection_value_reaches_the_bus_from_every_signature(in_process_coordinator):
    here = wsync.Connection(in_process_coordinator.bus)
    assert wsync.Connection.of(here) is here and wsync.Connection.of(here.bus) == here
    with (
        wsync.Worker(here, agent_id="w", tensors={"x": np.zeros(4, np.uint8)}) as worker,
        wsync.Trainer(here, agent_id="t") as trainer,
        wsync.events(here, timeout=10) as stream,
    ):
        assert worker.connection == trainer.connection == stream.connection == here
        assert trainer.bus == worker.bus == here.bus
        assert trainer.publish(1, {"x": np.ones(4, np.uint8)}).wait(30).committed
        assert wsync.status(here)["committed_version"] == 1
        stream.next_event(timeout=10)
    with pytest.raises(wsync.InvalidArgumentError):
        wsync.Connection("")
    with pytest.raises(TypeError):
        wsync.Trainer(42)
    with pytest.raises(TypeError):
        wsync.Worker(here.bus, tensors={}, transport="ipc")  # the keywords of old are the Connection's fields now


def test_the_package_has_no_import_circle():
    # Every relative import of every module (those under TYPE_CHECKING and inside functions too), as a graph: it has
    # no cycle. (Importing each module alone proves nothing: `import wsync.x` runs wsync/__init__.py first.)
    import ast

    root = Path(wsync.__file__).parent
    graph = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
        name = ".".join(parts if parts[-1] != "__init__" else parts[:-1]) or "__init__"
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ((node.module,) if node.module else ()))
                names = [target] if node.module else [".".join(base + (alias.name,)) for alias in node.names]
                edges.update(n for n in names if n and n != name)
        graph[name] = edges
    graph.pop("__init__", None)  # the package's face imports everything, and nothing imports it back
    state = {}

    def visit(module, trail):
        if state.get(module) == "done" or module not in graph:
            return
        assert state.get(module) != "open", f"import circle: {' -> '.join(trail + [module])}"
        state[module] = "open"
        for target in sorted(graph[module]):
            visit(target, trail + [module])
        state[module] = "done"

    for module in sorted(graph):
        visit(module, [])
    assert "outcome" in graph["errors"] and "trainer" not in graph["errors"]


def test_importing_wsync_imports_neither_torch_nor_numpy(tmp_path):
    import subprocess

    code = "import sys, wsync; wsync.library_path(); print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_missing_library_names_every_place_looked_at(tmp_path):
    import os
    import subprocess

    code = "import wsync\ntry:\n    wsync.library_path()\nexcept wsync.Error as e:\n    print(e.status, e)"
    env = dict(os.environ, WSYNC_LIBRARY=str(tmp_path / "nowhere.so"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    # WSYNC_LIBRARY, when set, is the only place: a wrong path is never replaced silently by another library.
    assert f"{tmp_path / 'nowhere.so'} (WSYNC_LIBRARY: no such file)" in out.stdout, out.stdout
    assert out.stdout.startswith("unavailable")
    del env["WSYNC_LIBRARY"]
    package = tmp_path / "pkg"
    import shutil

    shutil.copytree(Path(wsync.__file__).parent, package / "wsync", ignore=shutil.ignore_patterns("_native"))
    env["PYTHONPATH"] = str(package)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path
    )
    assert "_native/lib/libwsync.so (no such file)" in out.stdout and "libwsync.so.1" in out.stdout, out.stdout
