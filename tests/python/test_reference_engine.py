"""The RL examples' reference engine (examples/rl/reference_engine.py) on its own, CPU and the tiny model: its three
pause modes, its version tags, and the determinism the examples' exact checks rest on."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="the reference engine serves a transformers causal LM")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "rl"))
import policy_models  # noqa: E402
from conftest import wait_until  # noqa: E402
from reference_engine import ReferenceEngine, deterministic  # noqa: E402

# Far longer than any step of the tiny model: only a hang reaches it.
HANG_SECONDS = 60
PROMPTS = policy_models.prompts(6, 512, seed=9)


@pytest.fixture(scope="module")
def model():
    deterministic()
    return policy_models.build("tiny", seed=3)


class Version:
    """What a worker's applied_version would say; the tests move it while the engine is parked."""

    def __init__(self):
        self.value = 1

    def __call__(self):
        return self.value


def paused_at(engine, requests, tokens, mode):
    """Starts a pause in `mode` from another thread (as the worker's I/O thread would) once the longest request
    has `tokens` tokens; returns the thread and an event set when pause() returned."""
    returned = threading.Event()

    def pause():
        while max(len(request.tokens) for request in requests) < tokens:
            threading.Event().wait(0.001)
        engine.pause(mode)
        returned.set()

    thread = threading.Thread(target=pause, daemon=True)
    thread.start()
    return thread, returned


def test_the_same_batch_gives_the_same_tokens_whatever_ran_before(model):
    with ReferenceEngine(model, "cpu") as engine:
        first = [request.tokens for request in engine.generate(PROMPTS, 12)]
        engine.generate(PROMPTS[:2], 7)
        again = [request.tokens for request in engine.generate(PROMPTS, 12)]
        # A request that finishes early stays an inert row: the others go on as if it ran to the end.
        shorter = [request.tokens for request in engine.generate(PROMPTS, [12, 3, 12, 12, 12, 12])]
    assert first == again
    assert shorter[1] == first[1][:3] and shorter[:1] + shorter[2:] == first[:1] + first[2:]


def test_keep_freezes_requests_and_they_continue_under_the_new_weights_with_spans_at_their_pause_point():
    deterministic()
    model = policy_models.build("tiny", seed=3)  # its own: the test writes another version into it
    version = Version()
    other = policy_models.build("tiny", seed=4)
    with ReferenceEngine(model, "cpu", version=version) as engine:
        requests = [engine.submit(prompt, 20) for prompt in PROMPTS]
        thread, returned = paused_at(engine, requests, 6, "keep")
        assert returned.wait(HANG_SECONDS)
        kept = [len(request.tokens) for request in requests]
        assert all(0 < count < 20 for count in kept) and not any(request.finished for request in requests)
        with torch.no_grad():  # a new version written while parked, as the worker does
            for (_, tensor), (_, new) in zip(model.named_parameters(), other.named_parameters()):
                tensor.copy_(new)
        version.value = 2
        engine.resume(2)
        assert all(request.wait(HANG_SECONDS) for request in requests)
        thread.join()
    assert engine.pauses[0]["mode"] == "keep" and engine.pauses[0]["kept"] == len(PROMPTS)
    for request, count in zip(requests, kept):
        assert request.spans.spans == [(0, 1), (count, 2)] and request.finish_reason == "length"
    # What came after the pause is exactly what an engine holding only the new weights makes of the kept requests.
    with ReferenceEngine(other, "cpu") as fresh:
        continued = fresh.generate([r.prompt + r.tokens[:k] for r, k in zip(requests, kept)], [20 - k for k in kept])
    assert [request.tokens for request in continued] == [r.tokens[k:] for r, k in zip(requests, kept)]


def test_abort_ends_running_requests_and_the_engine_serves_new_ones_after_resume(model):
    with ReferenceEngine(model, "cpu") as engine:
        requests = [engine.submit(prompt, 40) for prompt in PROMPTS]
        thread, returned = paused_at(engine, requests, 4, "abort")
        assert returned.wait(HANG_SECONDS)
        assert all(request.finish_reason == "abort" and request.done.is_set() for request in requests)
        assert all(len(request.tokens) < 40 for request in requests)
        engine.resume(1)
        thread.join()
        after = engine.generate(PROMPTS[:2], 5, timeout=HANG_SECONDS)
    assert [request.finish_reason for request in after] == ["length", "length"]
    assert engine.pauses[0]["aborted"] == len(PROMPTS)


def test_wait_drains_running_requests_before_parking_and_holds_new_ones_until_resume(model):
    with ReferenceEngine(model, "cpu") as engine:
        requests = [engine.submit(prompt, 15) for prompt in PROMPTS]
        thread, returned = paused_at(engine, requests, 3, "wait")
        assert returned.wait(HANG_SECONDS)
        # pause() returned only once every running request had finished, by length.
        assert all(request.finish_reason == "length" and len(request.tokens) == 15 for request in requests)
        late = engine.submit(PROMPTS[0], 3)
        assert not late.wait(0.2), "a request was served while the engine was paused"
        engine.resume(1)
        thread.join()
        assert late.wait(HANG_SECONDS) and late.finish_reason == "length" and len(late.tokens) == 3


def test_a_pause_on_an_idle_engine_parks_at_once_and_pause_modes_are_checked(model):
    with ReferenceEngine(model, "cpu") as engine:
        done = threading.Event()
        threading.Thread(target=lambda: (engine.pause("keep"), done.set()), daemon=True).start()
        assert done.wait(HANG_SECONDS)
        engine.resume(1)
        with pytest.raises(ValueError, match="pause mode 'drain'"):
            engine.pause("drain")
        with pytest.raises(ValueError, match="max_tokens 0"):
            engine.submit([1, 2], 0)


# ---- the modes through wsync: a real round pauses the engine --------------------------------------------------------


@pytest.mark.parametrize("mode", ["abort", "wait"])
def test_a_round_in_abort_or_wait_mode_pauses_the_engine_as_the_mode_says(mode, coordinator):
    import wsync

    policy = policy_models.build("tiny", seed=5)
    model = policy_models.build("tiny", seed=12345)
    with (
        ReferenceEngine(model, "cpu", version=lambda: worker.applied_version) as engine,
        wsync.Worker(
            coordinator.bus,
            agent_id="engine-0",
            tensors=model.named_parameters(),
            on_pause=engine.pause,
            on_resume=engine.resume,
            on_withdraw=engine.withdraw,
        ) as worker,
        wsync.Trainer(coordinator.bus, agent_id="trainer") as trainer,
    ):
        assert trainer.publish(1, policy.named_parameters()).wait(HANG_SECONDS).committed
        worker.wait_for_version(1, timeout=HANG_SECONDS)
        requests = [engine.submit(prompt, 300) for prompt in PROMPTS]
        while max(len(request.tokens) for request in requests) < 5:
            threading.Event().wait(0.001)
        policy_models.train_steps(policy, 1, seed=6)
        outcome = trainer.publish(2, None, pause_mode=mode).wait(HANG_SECONDS)
        assert outcome.committed, outcome
        worker.wait_for_version(2, timeout=HANG_SECONDS)
        assert all(request.wait(HANG_SECONDS) for request in requests)
        # The engine records a pause once it resumes from it, on its own thread: after the version is applied.
        wait_until(lambda: len(engine.pauses) == 2, timeout=HANG_SECONDS, what="version 2's pause recorded")
        pause = engine.pauses[-1]
        assert pause["mode"] == mode
        if mode == "abort":  # ended at the pause, mid-output, every token from version 1
            assert all(request.finish_reason == "abort" and len(request.tokens) < 300 for request in requests)
            assert pause["aborted"] == len(PROMPTS)
        else:  # drained before the engine parked: whole outputs, every token from version 1
            assert all(request.finish_reason == "length" and len(request.tokens) == 300 for request in requests)
        assert all(request.spans.spans == [(0, 1)] for request in requests)
        after = engine.generate(PROMPTS[:2], 4, timeout=HANG_SECONDS)
        assert all(request.spans.spans == [(0, 2)] for request in after)
