"""A small inference engine that behaves as vLLM does where weight updates are concerned, for wsync's RL examples.

It serves a Hugging Face causal LM (`transformers`) in place: batched greedy decoding with a KV cache, requests
admitted while others run, pause modes abort / wait / keep around a weight update, and every output tagged with
the version of the weights that produced each of its tokens. wsync's worker writes new versions straight into
the model's parameters while the engine is parked.

The step loop (a thread of its own, as vLLM's engine core loop) runs one of two kinds of step:
  rebuild  every running request's whole sequence (prompt and tokens so far) in one left-padded forward pass,
           which makes a fresh KV cache and each request's next token. It runs when requests are admitted and
           at resume after a pause in keep mode (the cache was dropped at the pause: vLLM resets its prefix cache
           and recomputes the kept requests under the new weights).
  decode   one token for every row of the batch from the cache.
A request that finishes stays in the batch as an inert row until the next rebuild, so the shapes of a batch never
change between rebuilds.

Determinism: the tokens of a row depend only on the rows' contents and the batch's shapes, never on what ran
before the last rebuild. A fresh engine given the same requests in the same order (each prompt extended by the
tokens produced before a pause) therefore runs the same kernels on the same inputs and, with deterministic
kernels (`deterministic()`), produces bit-identical logits: the examples check keep mode token for token this
way. Rows never interact (attention is per row; a GEMM's rows are independent of each other's values).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from wsync.errors import PauseWithdrawn
from wsync.spans import SpanRecorder

__all__ = ["ReferenceEngine", "Request", "deterministic"]

# The idle step loop's longest sleep: submit, pause and close wake it at once; this only bounds a missed wake-up.
IDLE_WAIT_SECONDS = 0.1
# pause() and a parked engine wait in slices of this, so that close() and Ctrl-C are noticed.
WAIT_SLICE_SECONDS = 0.1
PAUSE_MODES = ("abort", "wait", "keep")


def deterministic() -> None:
    """Deterministic kernels (and no TF32): the same inputs in the same shapes give bit-identical outputs.
    CUBLAS_WORKSPACE_CONFIG must be in the environment before CUDA starts (the examples set it)."""
    torch.use_deterministic_algorithms(True)
    if hasattr(torch.backends, "cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False


@dataclass
class Request:
    """One generation request. `tokens` grows as the engine generates; `spans` (wsync.SpanRecorder) lists
    (first token index, version) for every change of weight version within the output; `finish_reason` is
    "length" or "abort"."""

    prompt: list[int]
    max_tokens: int
    index: int = 0
    tokens: list[int] = field(default_factory=list)
    spans: SpanRecorder = field(default_factory=SpanRecorder)
    finish_reason: str | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def record(self, token: int, version: int) -> None:
        self.spans.record(len(self.tokens), version)
        self.tokens.append(token)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def wait(self, timeout: float | None = None) -> bool:
        return self.done.wait(timeout)


class ReferenceEngine:
    """Serves `model` (a transformers causal LM, eval mode, on `device`) from a thread of its own.

    version: returns the version the parameters hold now (a wsync worker's `applied_version`), read once per step.
    Pass `pause`, `resume` and `withdraw` as a wsync.Worker's on_pause / on_resume / on_withdraw: pause(mode)
    returns once the engine has quiesced as the mode says and its GPU work is done; the worker then writes the new
    version into the parameters; resume() lets it go on. withdraw() calls off a pause the engine is still draining
    for (the round ended meanwhile): it admits requests again, and pause() raises wsync.PauseWithdrawn."""

    def __init__(
        self,
        model,
        device,
        version: Callable[[], int] = lambda: 0,
        pad_token_id: int = 0,
        on_step: Callable[[ReferenceEngine], None] | None = None,
    ):
        self.model = model
        self.device = torch.device(device)
        self.version = version
        self.pad_token_id = pad_token_id
        self.on_step = on_step  # called after every step, on the engine's thread (the examples' triggers)
        self._lock = threading.Condition()
        self._waiting: list[Request] = []
        self._batch: list[Request] = []  # rows of the current cache, in admission order
        self._cache = None
        self._mask: torch.Tensor | None = None
        self._positions: torch.Tensor | None = None
        self._next_tokens: torch.Tensor | None = None
        self._pause_mode: str | None = None  # asked for, not yet reached
        self._pause_asked = 0.0  # when it was asked for (monotonic)
        self._parked = False
        self._resumes = 0
        self._withdrawals = 0
        self._closed = False
        self._admitted = 0
        self.steps = 0
        self.pauses: list[dict] = []  # per pause: mode, step, when asked / parked / resumed, requests kept / aborted
        self.withdrawals: list[dict] = []  # per withdrawn pause: round, step, when asked / withdrawn
        self.step_log: list[tuple] = []  # per step: (monotonic end time, tokens recorded, version)
        self._thread = threading.Thread(target=self._loop, name="reference-engine", daemon=True)
        self._failure: BaseException | None = None
        self._thread.start()

    # -- requests ------------------------------------------------------------------------------------------------
    def submit(self, prompt: Sequence[int], max_tokens: int) -> Request:
        if max_tokens < 1:
            raise ValueError(f"max_tokens {max_tokens}: at least 1")
        if not prompt:
            raise ValueError("an empty prompt")
        with self._lock:
            self._raise_failure()
            request = Request(list(prompt), max_tokens, index=self._admitted)
            self._admitted += 1
            self._waiting.append(request)
            self._lock.notify_all()
            return request

    def generate(self, prompts: Sequence[Sequence[int]], max_tokens, timeout: float = 600.0) -> list[Request]:
        """Submits every prompt at once (one batch) and waits for all; `max_tokens` is one count or one per prompt."""
        counts = list(max_tokens) if isinstance(max_tokens, (list, tuple)) else [max_tokens] * len(prompts)
        with self._lock:  # admitted together, so that they form one batch
            requests = [self.submit(prompt, count) for prompt, count in zip(prompts, counts)]
        deadline = time.monotonic() + timeout
        for request in requests:
            if not request.wait(max(0.0, deadline - time.monotonic())):
                self._raise_failure()
                raise TimeoutError(f"request {request.index} did not finish within {timeout} s")
        self._raise_failure()
        return requests

    # -- pause and resume (wsync.Worker callbacks: the agent's thread) ---------------------------------------------
    def pause(self, mode: str = "keep", round: int = 0) -> None:
        if mode not in PAUSE_MODES:
            raise ValueError(f"pause mode '{mode}': use one of {', '.join(PAUSE_MODES)}")
        with self._lock:
            self._raise_failure()
            if self._parked:
                return
            before = self._withdrawals
            self._pause_mode = mode
            self._pause_asked = time.monotonic()
            self._lock.notify_all()
            while not self._parked and not self._closed and self._failure is None and self._withdrawals == before:
                self._lock.wait(WAIT_SLICE_SECONDS)
            self._raise_failure()
            if self._withdrawals != before and not self._parked:
                raise PauseWithdrawn(
                    f"round {round}: the engine was still draining"
                    if round
                    else "the operator's pause: the engine was still draining"
                )

    def withdraw(self, round: int = 0) -> None:
        """Calls off a pause the engine has not parked for (any thread): it admits requests again."""
        with self._lock:
            if self._parked or self._pause_mode is None:
                return
            self._pause_mode = None
            self._withdrawals += 1
            self.withdrawals.append(
                {"round": round, "step": self.steps, "asked": self._pause_asked, "withdrawn": time.monotonic()}
            )
            self._lock.notify_all()

    def wait_for_pause_request(self, timeout: float) -> bool:
        """Waits until a pause has been asked for (by pause(), from another thread): True if one was, False after
        `timeout` seconds. For a driver that wants the pause to land exactly where it asked for the update."""
        with self._lock:
            return (
                self._lock.wait_for(lambda: self._pause_mode is not None or self._closed, timeout)
                and self._pause_mode is not None
            )

    def resume(self, version: int | None = None) -> None:
        with self._lock:
            self._pause_mode = None
            self._parked = False
            self._resumes += 1
            self._lock.notify_all()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._thread.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the step loop ---------------------------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while True:
                with self._lock:
                    if self._closed:
                        return
                    mode = self._pause_mode
                    admit = [] if mode is not None else self._waiting[:]
                    if admit:
                        self._waiting.clear()
                running = [request for request in self._batch if not request.finished]
                if mode is not None and (mode != "wait" or not running):
                    self._park(mode, running)
                    continue
                if admit or (running and self._cache is None):
                    self._rebuild(running + admit)
                elif running:
                    self._decode()
                else:
                    with self._lock:
                        if not self._waiting and self._pause_mode is None and not self._closed:
                            self._lock.wait(IDLE_WAIT_SECONDS)
                    continue
                if self.on_step is not None:
                    self.on_step(self)
        except BaseException as failure:  # noqa: BLE001 - handed to the caller of submit/generate/pause
            with self._lock:
                self._failure = failure
                for request in self._waiting + self._batch:
                    request.done.set()
                self._lock.notify_all()

    def _park(self, mode: str, running: list[Request]) -> None:
        """Quiesces as `mode` says, declares the engine parked and waits for resume()."""
        started = time.monotonic()
        if mode == "abort":
            for request in running:
                self._finish(request, "abort")
        # keep: the running requests stay, their KV is dropped and recomputed under the new weights at resume.
        self._cache = None
        self._mask = self._positions = self._next_tokens = None
        if mode != "keep":
            self._batch = []
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # nothing of ours reads the parameters while they are written
        with self._lock:
            if self._pause_mode is None:
                return  # withdrawn since the loop read it: nobody waits for this park, nobody would resume it
            before = self._resumes
            self._parked = True
            self._lock.notify_all()
            while self._resumes == before and not self._closed:
                self._lock.wait(WAIT_SLICE_SECONDS)
        self.pauses.append(
            {
                "mode": mode,
                "step": self.steps,
                "asked": self._pause_asked,
                "started": started,
                "resumed": time.monotonic(),
                "kept": len(running) if mode == "keep" else 0,
                "aborted": len(running) if mode == "abort" else 0,
            }
        )

    @torch.inference_mode()
    def _rebuild(self, rows: list[Request]) -> None:
        """One forward pass over every row's whole sequence, left-padded: a fresh cache and each row's next token."""
        sequences = [request.prompt + request.tokens for request in rows]
        width = max(len(sequence) for sequence in sequences)
        ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for row, sequence in enumerate(sequences):
            ids[row, width - len(sequence) :] = torch.tensor(sequence, dtype=torch.long)
            mask[row, width - len(sequence) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        output = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        self._batch = rows
        self._cache = output.past_key_values
        self._mask = mask
        self._positions = positions[:, -1:]
        self._take(output.logits[:, -1, :])

    @torch.inference_mode()
    def _decode(self) -> None:
        self._mask = torch.cat([self._mask, self._mask.new_ones((len(self._batch), 1))], dim=1)
        self._positions = self._positions + 1
        output = self.model(
            input_ids=self._next_tokens,
            attention_mask=self._mask,
            position_ids=self._positions,
            past_key_values=self._cache,
            use_cache=True,
        )
        self._cache = output.past_key_values
        self._take(output.logits[:, -1, :])

    def _take(self, logits: torch.Tensor) -> None:
        """Greedy choice for every row; running rows record theirs, tagged with the parameters' version."""
        version = self.version()
        chosen = logits.argmax(dim=-1)
        self._next_tokens = chosen.unsqueeze(-1)
        tokens = chosen.tolist()  # waits for the step's GPU work
        self.steps += 1
        recorded = 0
        for request, token in zip(self._batch, tokens):
            if request.finished:
                continue  # an inert row: computed with the others, its token unused
            request.record(token, version)
            recorded += 1
            if len(request.tokens) >= request.max_tokens:
                self._finish(request, "length")
        self.step_log.append((time.monotonic(), recorded, version))

    def _finish(self, request: Request, reason: str) -> None:
        request.finish_reason = reason
        request.done.set()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise RuntimeError(f"the engine's step loop failed: {self._failure!r}") from self._failure
