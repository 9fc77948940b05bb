#!/usr/bin/env python3
"""Async RL through wsync, pausing in keep mode (vLLM's async RLHF example with its weight-syncing APIs): a batch
of requests is generating; once one has produced --pause-after tokens the trainer publishes the next version, the
engine freezes its requests (keep: their KV dropped), takes the version, recomputes their KV under it and goes on.

    python examples/rl/async_keep.py                                    # CPU, tiny model, shm: seconds
    python examples/rl/async_keep.py --updates 2                        # V1 -> V2 -> V3 while generating
    python examples/rl/async_keep.py --model qwen3-small --channel nccl \
        --trainer-device cuda:0 --engine-device cuda:1
    python examples/rl/async_keep.py --model qwen3-small --channel cuda_ipc \
        --trainer-device cuda:0 --engine-device cuda:0

The trainer is `run_trainer()` below, in a process of its own; the engine and its wsync.Worker are in `main()`.

Requests arrive in two waves (the second --stagger steps after the first), so they reach each pause with
different numbers of tokens. Checks (exit code 1 if any fails):
  - every request's spans are [0, k1) = V1, [k1, k2) = V2, ... with k_i the tokens it had when update i paused it;
  - exactness: for every update, a fresh engine holding only the new version (loaded from the trainer's file, its
    bytes checked), given every kept request's prompt plus its tokens before the pause, in the same order,
    produces exactly the tokens that came after the pause (until the next pause), token for token;
  - the engine ends holding the last version byte for byte.
Timings: each update's round, and the generation it cost (tokens/s around it, the stall between the last token
before the pause and the first after).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
from pathlib import Path

import policy_models
import scenario_support as S
from reference_engine import ReferenceEngine

import wsync

# How many steps before a pause the steady generation rate is taken over.
RATE_WINDOW_STEPS = 5
# Longest wait for the pause of a version just asked for: its round's begin and pause, on a loaded machine.
PAUSE_REQUEST_TIMEOUT_SECONDS = 60.0


class Triggers:
    """Runs on the engine's thread after every step: admits the second wave, and asks the trainer for the next
    version when the longest output reaches the next pause point (what vLLM's example does by polling its
    requests' outputs)."""

    def __init__(self, policy, waves, stagger, pause_points):
        self.policy = policy
        self.waves = waves
        self.stagger = stagger
        self.pause_points = list(pause_points)  # tokens of the longest output at which update i is asked for
        self.requests = []
        self.asked = []  # (version, engine step)
        self.lock = threading.Lock()
        self.all_submitted = threading.Event()

    def __call__(self, engine) -> None:
        if engine.steps == self.stagger and not self.all_submitted.is_set():
            prompts, counts = self.waves[1]
            with self.lock:
                self.requests += [engine.submit(prompt, count) for prompt, count in zip(prompts, counts)]
            self.all_submitted.set()
        update = len(self.asked)
        if update >= len(self.pause_points):
            return
        version = update + 2
        if engine.version() != version - 1:
            return  # the previous update has not landed yet
        longest = max((len(request.tokens) for request in self.requests), default=0)
        if longest >= self.pause_points[update]:
            self.policy.send(version)  # the trainer publishes it now; its outcome comes once the round has ended
            self.asked.append((version, engine.steps))
            # vLLM's driver pauses the engine at this point itself; here the pause comes through the bus, so the
            # engine waits for it to be asked for and parks before its next step, wherever the machine is slow.
            engine.wait_for_pause_request(PAUSE_REQUEST_TIMEOUT_SECONDS)


def publish(trainer: wsync.Trainer, version: int, tensors) -> dict:
    """One version through the bus, keep mode: the engine's requests are frozen, not ended, while it is applied."""
    try:
        outcome = trainer.publish(version, tensors, pause_mode="keep").wait(timeout=S.COMMAND_TIMEOUT_SECONDS)
    except (wsync.AbortedError, wsync.RefusedError) as failed:
        outcome = failed.outcome
    return S.outcome_record(outcome)


def run_trainer(link: S.Link, bus: str, arguments, versions: list[int], workdir: str) -> None:
    """The trainer's process: version 1 (the initial weights) now; the later versions trained ahead, kept aside and
    each published when the engine reaches its pause point. Each version's state is saved for the fresh engines
    of the checks."""
    S.use_device(arguments.trainer_device)
    model = policy_models.build(arguments.model, arguments.seed, arguments.trainer_device)
    with wsync.Trainer(
        bus, agent_id="trainer", channel=arguments.channel, cuda_device=S.device_index(arguments.trainer_device)
    ) as trainer:
        link.send(publish(trainer, 1, model.named_parameters()))
        policy_models.save_state(model, Path(workdir) / "v1.pt")
        prepared = {}
        for version in versions:
            losses = policy_models.train_steps(model, arguments.train_steps, arguments.seed + version)
            prepared[version] = {name: tensor.detach().clone() for name, tensor in model.named_parameters()}
            path = Path(workdir) / f"v{version}.pt"
            policy_models.save_state(model, path)
            link.send({"losses": losses, "digests": policy_models.digests(prepared[version].items()), "path": path})
        for _ in versions:
            asked = link.receive()  # the engine's trigger: this version's pause point
            link.send(publish(trainer, asked, prepared[asked]))


def spans_of(request):
    return list(request.spans.spans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    S.common_arguments(parser)
    parser.add_argument("--requests", type=int, default=8, help="requests in the batch (two waves)")
    parser.add_argument("--max-tokens", type=int, default=40, help="the first request's; later ones get more")
    parser.add_argument("--pause-after", type=int, default=10, help="tokens of the longest output at update 1")
    parser.add_argument("--updates", type=int, default=1, help="versions published while generation goes on")
    parser.add_argument("--update-gap", type=int, default=10, help="tokens between one update and the next")
    parser.add_argument("--stagger", type=int, default=3, help="steps between the two waves")
    arguments = parser.parse_args()
    report = S.Report("async_keep", arguments)
    bus = arguments.bus or S.unique_bus("async-keep")
    vocab = policy_models.config_for(arguments.model).vocab_size
    prompts = policy_models.prompts(arguments.requests, vocab, seed=arguments.seed + 200)
    counts = [arguments.max_tokens + 2 * index for index in range(arguments.requests)]
    half = arguments.requests // 2
    waves = [(prompts[:half], counts[:half]), (prompts[half:], counts[half:])]
    pause_points = [arguments.pause_after + update * arguments.update_gap for update in range(arguments.updates)]
    versions = list(range(2, 2 + arguments.updates))
    if pause_points[-1] + arguments.stagger >= counts[0]:
        parser.error("--max-tokens must leave every request running past the last pause point")

    device = arguments.engine_device
    S.use_device(device)
    model = policy_models.build(arguments.model, S.ENGINE_SEED, device)  # other weights than the policy's
    triggers = Triggers(None, waves, arguments.stagger, pause_points)
    with (
        wsync.Coordinator(bus),
        tempfile.TemporaryDirectory() as workdir,
        ReferenceEngine(model, device, version=lambda: worker.applied_version, on_step=triggers) as engine,
        wsync.Worker(
            bus,
            agent_id="engine-0",
            tensors=model.named_parameters(),
            on_pause=engine.pause,
            on_resume=engine.resume,
            on_withdraw=engine.withdraw,
            cuda_device=S.device_index(device),
        ) as worker,
    ):
        policy = triggers.policy = S.Peer(run_trainer, bus, arguments, versions, workdir, name="trainer")
        try:
            first = policy.receive()
            report.check("version 1 (the initial weights) committed", first["kind"] == "committed", first["detail"])
            prepared = {1: {"path": Path(workdir) / "v1.pt"}}
            # The versions to come are trained now and kept aside: each is published at its pause point.
            for version in versions:
                prepared[version] = policy.receive()
                losses = prepared[version]["losses"]
                report.say(f"version {version} prepared: loss {losses[0]:.4f} -> {losses[-1]:.4f}")

            # Generation: the first wave now, the second from the engine's thread; updates land as it goes.
            prompts_a, counts_a = waves[0]
            with triggers.lock:
                triggers.requests += [engine.submit(prompt, count) for prompt, count in zip(prompts_a, counts_a)]
            if not triggers.all_submitted.wait(S.COMMAND_TIMEOUT_SECONDS):
                raise TimeoutError("the second wave was never admitted")
            for request in triggers.requests:
                if not request.wait(S.COMMAND_TIMEOUT_SECONDS):
                    raise TimeoutError(f"request {request.index} never finished")
            outcomes = [policy.receive() for _ in triggers.asked]
            requests = sorted(triggers.requests, key=lambda request: request.index)
            for outcome in outcomes:
                report.say(f"update: {S.describe_outcome(outcome)}")
                report.check(
                    f"version {outcome['version']} committed while generating",
                    outcome["kind"] == "committed",
                    outcome["detail"],
                )
            report.check(
                f"{len(versions)} update(s) asked for", len(triggers.asked) == len(versions), f"asked: {triggers.asked}"
            )
            pauses = engine.pauses[1:]  # the first: version 1's, before any request
            report.check(
                "every update paused the engine in keep mode, keeping every request",
                [(pause["mode"], pause["kept"]) for pause in pauses] == [("keep", len(requests))] * len(versions),
                f"pauses: {pauses}",
            )

            # Spans: [0, k1) = V1, [k1, k2) = V2, ... for every request of the batch.
            expected_versions = [1] + versions
            bad = []
            for request in requests:
                try:
                    wsync.check_spans(request.spans, len(request.tokens))
                except ValueError as problem:
                    bad.append(f"request {request.index}: {problem}")
                    continue
                spans = spans_of(request)
                if [version for _, version in spans] != expected_versions or request.finish_reason != "length":
                    bad.append(f"request {request.index}: spans {spans}, finished by {request.finish_reason}")
            report.check(
                f"every request's spans are {' -> '.join(f'V{v}' for v in expected_versions)} at its pause points",
                not bad,
                "; ".join(bad[:3]),
            )
            for request in requests:
                report.say(f"  request {request.index}: {len(request.tokens)} tokens, spans {spans_of(request)}")

            # Exactness, update by update.
            for update, version in enumerate(versions):
                rows, starts, ends = [], [], []
                for request in requests:
                    spans = spans_of(request)
                    at = next((i for i, (_, v) in enumerate(spans) if v == version), None)
                    if at is None:
                        continue
                    rows.append(request)
                    starts.append(spans[at][0])
                    ends.append(spans[at + 1][0] if at + 1 < len(spans) else len(request.tokens))
                fresh = S.fresh_engine(arguments.model, arguments.engine_device, prepared[version]["path"])
                try:
                    report.same_weights(
                        f"the fresh engine holds version {version} byte for byte",
                        policy_models.digests(fresh.model.named_parameters()),
                        prepared[version]["digests"],
                    )
                    again = fresh.generate(
                        [r.prompt + r.tokens[:k] for r, k in zip(rows, starts)],
                        [end - k for k, end in zip(starts, ends)],
                    )
                finally:
                    fresh.close()
                after_pause = [r.tokens[k:end] for r, k, end in zip(rows, starts, ends)]
                report.same_tokens(
                    f"update {update + 1}: a fresh V{version} engine continues all {len(rows)} kept "
                    f"requests exactly as the paused engine did after the pause",
                    S.outputs(again),
                    after_pause,
                )
                # The check can tell versions apart: the version before would have continued otherwise.
                stale = S.fresh_engine(arguments.model, arguments.engine_device, prepared[version - 1]["path"])
                try:
                    previous = stale.generate(
                        [r.prompt + r.tokens[:k] for r, k in zip(rows, starts)],
                        [end - k for k, end in zip(starts, ends)],
                    )
                finally:
                    stale.close()
                report.check(
                    f"update {update + 1}: V{version - 1} would have continued otherwise",
                    S.outputs(previous) != after_pause,
                    f"V{version - 1} and V{version} produce the same tokens: the check above proves nothing",
                )
            report.same_weights(
                f"the engine ends holding V{versions[-1]} byte for byte",
                policy_models.digests(model.named_parameters()),
                prepared[versions[-1]]["digests"],
            )
            report_generation_cost(report, engine, pauses, outcomes)
        finally:
            policy.close()
    S.exit_with(report)


def report_generation_cost(report, engine, pauses, outcomes) -> None:
    """Per update: the round's time, and what generation lost around it (from the engine's step log)."""
    log = engine.step_log
    updates = []
    for pause, outcome in zip(pauses, outcomes):
        before = [entry for entry in log if entry[0] <= pause["started"]]
        after = [entry for entry in log if entry[0] > pause["resumed"]]
        if len(before) < RATE_WINDOW_STEPS + 1 or len(after) < RATE_WINDOW_STEPS + 1:
            continue
        window = before[-(RATE_WINDOW_STEPS + 1) :]
        step_s = statistics.median(b[0] - a[0] for a, b in zip(window, window[1:]))
        rate_before = sum(entry[1] for entry in window[1:]) / (window[-1][0] - window[0][0])
        later = after[: RATE_WINDOW_STEPS + 1]
        rate_after = sum(entry[1] for entry in later[1:]) / (later[-1][0] - later[0][0])
        # From the last token before the pause, or from the pause's arrival where the engine waited for it (the
        # example holds it at the pause point; a real engine would have gone on generating meanwhile).
        stall = after[0][0] - max(before[-1][0], pause["asked"])
        updates.append(
            {
                "version": outcome["version"],
                "round_ms": round(outcome["total_s"] * 1000, 3),
                "bytes": outcome["bytes"],
                "parked_ms": round((pause["resumed"] - pause["started"]) * 1000, 3),
                "stall_ms": round(stall * 1000, 3),
                "step_ms": round(step_s * 1000, 3),
                "lost_ms": round((stall - step_s) * 1000, 3),
                "tokens_per_s_before": round(rate_before, 1),
                "tokens_per_s_after": round(rate_after, 1),
            }
        )
        report.say(
            f"V{outcome['version']}: round {outcome['total_s'] * 1000:.1f} ms, engine parked "
            f"{(pause['resumed'] - pause['started']) * 1000:.1f} ms, stall {stall * 1000:.1f} ms against a "
            f"{step_s * 1000:.1f} ms step; {rate_before:.0f} tokens/s before, {rate_after:.0f} after"
        )
    report.timing("updates", updates)


if __name__ == "__main__":
    main()
