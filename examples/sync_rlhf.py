#!/usr/bin/env python3
"""Sync RLHF through wsync (vLLM's RLHF example, rlhf.py, step for step): a policy trains in one
process, an inference engine generates in another; the engine's weights are updated from the trainer between
generations.

    python examples/sync_rlhf.py                                        # CPU, tiny model, shm: seconds
    python examples/sync_rlhf.py --model qwen3-small --channel nccl \\
        --trainer-device cuda:0 --engine-device cuda:1                  # two GPUs
    python examples/sync_rlhf.py --model qwen3-small --channel cuda_ipc \\
        --trainer-device cuda:0 --engine-device cuda:0                  # trainer and engine on one GPU

Checks (the exit code is 1 if any fails): the engine's weights equal the policy's byte for byte after each
update; its greedy outputs equal the policy model's own greedy outputs token for token (the same batch through the
same engine code, deterministic kernels, fp32); the update changed the outputs; every token is tagged with the
version that produced it.
"""
from __future__ import annotations

import argparse

import policy_models
import scenario_support as S
import wsync


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    S.common_arguments(parser)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=24)
    arguments = parser.parse_args()
    report = S.Report("sync_rlhf", arguments)
    bus = arguments.bus or S.unique_bus("sync-rlhf")
    vocab = policy_models.config_for(arguments.model).vocab_size
    prompts = policy_models.prompts(arguments.prompts, vocab, seed=arguments.seed + 100)

    with wsync.Coordinator(bus):
        policy = S.PolicyProcess(bus, arguments.model, arguments.seed, arguments.trainer_device, arguments.channel)
        engine = S.EngineWorker(bus, arguments.model, arguments.engine_device)
        try:
            # vLLM: LLM(model=...) loads the policy's checkpoint. Here the engine starts from other weights and
            # takes version 1 from the trainer through wsync.
            first = policy.call("publish", 1, "wait")
            report.say(f"initial weights: {S.describe_outcome(first)}")
            report.check("version 1 committed", first["kind"] == "committed", first["detail"])
            # Committed: every worker verified the version; each writes it into its tensors at the commit. A sync
            # loop generates once its engine has applied it.
            engine.worker.wait_for_version(1, timeout=S.COMMAND_TIMEOUT_SECONDS)
            report.same_weights("the engine holds version 1 byte for byte", engine.digests(), policy.call("digests"))

            # vLLM: llm.generate(prompts)
            before = engine.engine.generate(prompts, arguments.max_tokens)
            report.same_tokens("version 1: the engine's outputs equal the policy's own",
                               S.outputs(before), policy.call("generate", prompts, arguments.max_tokens))

            # vLLM: the trainer's optimizer step, then init_weight_transfer_engine / update_weights (rank 0
            # broadcasts, the engine receives and loads). Here: Trainer.publish(version).
            losses = policy.call("train", arguments.train_steps, arguments.seed + 1)
            report.say(f"trained {arguments.train_steps} steps: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
            update = policy.call("publish", 2, "wait")
            report.say(f"update: {S.describe_outcome(update)}")
            report.check("version 2 committed", update["kind"] == "committed", update["detail"])
            engine.worker.wait_for_version(2, timeout=S.COMMAND_TIMEOUT_SECONDS)
            report.check("the engine applied version 2", engine.worker.applied_version == 2,
                         f"applied version {engine.worker.applied_version}")
            report.same_weights("the engine holds version 2 byte for byte", engine.digests(), policy.call("digests"))
            report.timing("update_total_ms", round(update["total_s"] * 1000, 3))
            report.timing("update_bytes", update["bytes"])

            # vLLM: llm.generate(prompts) again: the outputs of the updated weights
            after = engine.engine.generate(prompts, arguments.max_tokens)
            expected = policy.call("generate", prompts, arguments.max_tokens)
            report.same_tokens("version 2: the engine's outputs equal the trained policy's own", S.outputs(after),
                               expected)
            report.check("the update changed the outputs", S.outputs(after) != S.outputs(before),
                         "version 2 generates exactly what version 1 did: the check above proves nothing")
            tags = {tuple(request.spans.spans) for request in after} | {tuple(r.spans.spans) for r in before}
            report.check("every token is tagged with its version",
                         all(tuple(r.spans.spans) == ((0, 1),) for r in before)
                         and all(tuple(r.spans.spans) == ((0, 2),) for r in after), f"spans seen: {sorted(tags)}")
        finally:
            engine.close()
            policy.close()
    S.exit_with(report)


if __name__ == "__main__":
    main()
