"""vLLM's three pause modes through its server's /pause and /resume, around a wsync version, with a long request in
flight: its tokens, finish reason and weight-version spans are what each mode promises."""

from __future__ import annotations

import threading
import time

from conftest import PROMPTS

# Long enough to be in flight through the whole update on a 2-core machine; the KV cache holds it.
LONG_TOKENS = 1500
# A drain ("wait") lasts as long as the request: shorter, so the test does not wait on it for long.
DRAINED_TOKENS = 400
# Tokens the long request has decoded before the update starts.
IN_FLIGHT_TOKENS = 20


class InFlight:
    """One long greedy request on a thread of its own, started before the update."""

    def __init__(self, server, max_tokens: int) -> None:
        self.server = server
        self.max_tokens = max_tokens
        self.choice: dict | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.choice = self.server.generate(PROMPTS[0], self.max_tokens)
        except BaseException as error:  # noqa: BLE001 - reported by result()
            self.error = error

    def result(self, timeout: float = 600.0) -> dict:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the long request did not end in {timeout} s"
        if self.error is not None:
            raise self.error
        return self.choice

    def wait_until_generating(self, baseline: float) -> None:
        """Until vLLM's count of generated tokens has grown past `baseline` (taken before the request started) by
        enough to show this request decoding, so the update finds it in flight. vLLM's running-requests gauge
        keeps its last step's value while the engine idles, so it cannot say this."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if generated_tokens(self.server) >= baseline + IN_FLIGHT_TOKENS:
                return
            time.sleep(0.05)
        raise AssertionError("the long request never started decoding")


def generated_tokens(server) -> float:
    return server.metrics().get("vllm:generation_tokens_total", 0.0)


def spans_of(choice: dict) -> list[tuple[str, int, int]]:
    return [(span["version"], span["start"], span["end"]) for span in choice["weight_versions"] or []]


def update_around(server, coordinator, trainers, mode: str, max_tokens: int) -> tuple[str, dict]:
    trainer = trainers(coordinator.bus, "shm")
    trainer.ask("init_http", "initialized", url=server.url)
    before = server.get("/weight_info")["weight_version"]
    baseline = generated_tokens(server)
    request = InFlight(server, max_tokens)
    request.wait_until_generating(baseline)
    trainer.ask("sync", "synced", url=server.url, version=1, pause_mode=mode)
    assert server.get("/weight_info") == {"weight_version": "1"}
    return before, request.result()


def test_keep_freezes_the_request_and_resumes_it_under_the_new_version(server, coordinator, trainers):
    before, choice = update_around(server, coordinator, trainers, "keep", LONG_TOKENS)
    assert choice["finish_reason"] == "length"
    assert len(choice["token_ids"]) == LONG_TOKENS
    spans = spans_of(choice)
    assert [span[0] for span in spans] == [before, "1"], spans
    assert spans[0][1] == 0 and spans[0][2] == spans[1][1] and spans[1][2] == LONG_TOKENS
    assert 0 < spans[1][1] < LONG_TOKENS


def test_abort_ends_the_request_under_the_old_version(server, coordinator, trainers):
    before, choice = update_around(server, coordinator, trainers, "abort", LONG_TOKENS)
    assert choice["finish_reason"] == "abort"
    assert 0 < len(choice["token_ids"]) < LONG_TOKENS
    assert spans_of(choice) == [(before, 0, len(choice["token_ids"]))]


def test_wait_drains_the_request_under_the_old_version_first(server, coordinator, trainers):
    before, choice = update_around(server, coordinator, trainers, "wait", DRAINED_TOKENS)
    assert choice["finish_reason"] == "length"
    assert spans_of(choice) == [(before, 0, DRAINED_TOKENS)]
