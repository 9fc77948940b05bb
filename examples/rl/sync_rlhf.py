#!/usr/bin/env python3
"""Sync RLHF through wsync (vLLM's RLHF example, rlhf.py, step for step): a policy trains in one process, an
inference engine generates in another; the engine's weights are updated from the trainer between generations.

    python examples/rl/sync_rlhf.py                                     # CPU, tiny model, shm: seconds
    python examples/rl/sync_rlhf.py --model qwen3-small --channel nccl \\
        --trainer-device cuda:0 --engine-device cuda:1                  # two GPUs
    python examples/rl/sync_rlhf.py --model qwen3-small --channel cuda_ipc \\
        --trainer-device cuda:0 --engine-device cuda:0                  # trainer and engine on one GPU

The trainer is `run_trainer()` below, in a process of its own; the engine and its wsync.Worker are in `main()`.
Checks (the exit code is 1 if any fails): the engine's weights equal the policy's byte for byte after each
update; its greedy outputs equal the policy model's own greedy outputs token for token (the same batch through the
same engine code, deterministic kernels, fp32); the update changed the outputs; every token is tagged with the
version that produced it.
"""

from __future__ import annotations

import argparse

import policy_models
import scenario_support as S
from reference_engine import ReferenceEngine

import wsync

VERSIONS = (1, 2)


def run_trainer(link: S.Link, bus: str, arguments, prompts: list[list[int]]) -> None:
    """The trainer's process: publish the policy, learn from the engine's rollouts, publish the new version."""
    S.use_device(arguments.trainer_device)
    model = policy_models.build(arguments.model, arguments.seed, arguments.trainer_device)
    with wsync.Trainer(
        bus, agent_id="trainer", channel=arguments.channel, cuda_device=S.device_index(arguments.trainer_device)
    ) as trainer:
        losses = []
        for version in VERSIONS:
            if version > 1:
                link.receive()  # the engine's rollouts of the previous version (a real trainer's batch)
                losses = policy_models.train_steps(model, arguments.train_steps, arguments.seed + 1)
            # vLLM: init_weight_transfer_engine / update_weights (rank 0 broadcasts, the engine loads). Here:
            # Trainer.publish, zero-copy from the parameters; committed once every worker verified the bytes.
            try:
                outcome = trainer.publish(version, model.named_parameters(), pause_mode="wait").wait(
                    timeout=S.COMMAND_TIMEOUT_SECONDS
                )
            except (wsync.AbortedError, wsync.RefusedError) as failed:
                outcome = failed.outcome
            link.send(
                {
                    "outcome": S.outcome_record(outcome),
                    "losses": losses,
                    "digests": policy_models.digests(model.named_parameters()),
                    "expected": S.greedy_outputs(model, arguments.trainer_device, prompts, arguments.max_tokens),
                }
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    S.common_arguments(parser)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=24)
    arguments = parser.parse_args()
    report = S.Report("sync_rlhf", arguments)
    bus = arguments.bus or S.unique_bus("sync-rlhf")
    device = arguments.engine_device
    prompts = policy_models.prompts(
        arguments.prompts, policy_models.config_for(arguments.model).vocab_size, seed=arguments.seed + 100
    )
    S.use_device(device)
    # vLLM: LLM(model=...) loads the policy's checkpoint. Here the engine starts from other weights and takes
    # version 1 from the trainer through wsync.
    model = policy_models.build(arguments.model, S.ENGINE_SEED, device)
    with (
        wsync.Coordinator(bus),
        ReferenceEngine(model, device, version=lambda: worker.applied_version) as engine,
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
        policy = S.Peer(run_trainer, bus, arguments, prompts, name="trainer")
        try:
            generated = {}
            for version in VERSIONS:
                published = policy.receive()
                outcome = published["outcome"]
                if version > 1:
                    losses = published["losses"]
                    report.say(f"trained {arguments.train_steps} steps: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
                report.say(f"{'initial weights' if version == 1 else 'update'}: {S.describe_outcome(outcome)}")
                report.check(f"version {version} committed", outcome["kind"] == "committed", outcome["detail"])
                # Committed: every worker verified the version and writes it into its tensors at the commit. A
                # sync loop generates once its engine has applied it.
                worker.wait_for_version(version, timeout=S.COMMAND_TIMEOUT_SECONDS)
                if version > 1:
                    report.check(
                        f"the engine applied version {version}",
                        worker.applied_version == version,
                        f"applied version {worker.applied_version}",
                    )
                    report.timing("update_total_ms", round(outcome["total_s"] * 1000, 3))
                    report.timing("update_bytes", outcome["bytes"])
                report.same_weights(
                    f"the engine holds version {version} byte for byte",
                    policy_models.digests(model.named_parameters()),
                    published["digests"],
                )
                # vLLM: llm.generate(prompts)
                generated[version] = engine.generate(prompts, arguments.max_tokens)
                whose = "policy's own" if version == 1 else "trained policy's own"
                report.same_tokens(
                    f"version {version}: the engine's outputs equal the {whose}",
                    S.outputs(generated[version]),
                    published["expected"],
                )
                if version < VERSIONS[-1]:
                    policy.send(S.outputs(generated[version]))  # the rollouts the trainer learns from
        finally:
            policy.close()
    before, after = generated.get(1, []), generated.get(2, [])
    report.check(
        "the update changed the outputs",
        S.outputs(after) != S.outputs(before),
        "version 2 generates exactly what version 1 did: the check above proves nothing",
    )
    tags = {tuple(request.spans.spans) for request in before + after}
    report.check(
        "every token is tagged with its version",
        all(tuple(r.spans.spans) == ((0, 1),) for r in before)
        and all(tuple(r.spans.spans) == ((0, 2),) for r in after),
        f"spans seen: {sorted(tags)}",
    )
    S.exit_with(report)


if __name__ == "__main__":
    main()
