"""Async RLHF with vLLM and Ray, weights synced over wsync: vLLM's examples/rl/rlhf_async_new_apis.py with backend
"wsync".

A Hugging Face model trains in one Ray actor; a vLLM `AsyncLLM` generates in another. As in vLLM's example, a
batch of requests is in flight when the weights change: once any request has PAUSE_TOKEN_THRESHOLD tokens the
engine pauses in "keep" mode (requests frozen in the queue), the new weights are loaded, generation resumes, and
each request finishes under the new weights.

What changes from vLLM's nccl example:
* the engine is created with `WeightTransferConfig(backend="wsync")`, and a wsync coordinator runs the bus;
* the trainer learns from the previous batch's rollouts while the engine generates this one, then
  `WsyncSender.sync(client, params, pause=..., resume=...)` publishes the version over the bus *while the
  engine keeps generating* (every worker verifies it and it commits whole, or not at all), and only then pauses
  the engine (keep), has vLLM load the version from its staging tensors (start_weight_update /
  update_weights({"version": v}) / finish_weight_update(weight_version=str(v)), through vLLM's
  `RayVLLMWeightSyncClient`), and resumes: the pause lasts the local copy, not the transfer;
* which tokens came from which weights is read from vLLM's outputs: `weight_versions` spans carry wsync's
  version ([("default", 0, k), ("1", k, n)]), where vLLM's example infers the boundary from when outputs stream.

Validation: vLLM's example checks that the tokens after the swap equal what a fresh instance of the new model
generates from the prompt plus the tokens before the swap. That holds when the frozen requests' KV cache is
recomputed by the new weights, which is what `pause_generation(mode="keep")` does with its default
`clear_cache=True` in vLLM 0.32: the pause preempts the running requests and resets the KV cache, so on resume
each request is prefilled again (prompt + tokens so far) by the new weights. With `--keep-kv-cache`
(`clear_cache=False`) the requests continue over the KV cache the old weights wrote, and the tokens after the swap
are instead those of the new model over the old model's KV cache; the example checks whichever applies and
reports the other. The references are the trainer's own model (a fresh vLLM instance of it gives the same greedy
tokens in float32: the last checks, on requests submitted after the update, show it).

Without `--model`, a tiny random Qwen3 is made (no download; prompts are token ids, no tokenizer):

    VLLM_CPU_KVCACHE_SPACE=1 python examples/vllm/rlhf_async.py [--model PATH] [--keep-kv-cache]

Exit code 1 if a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import ray
import torch
from transformers import AutoModelForCausalLM
from vllm import AsyncEngineArgs, RequestOutput, SamplingParams
from vllm.config import WeightTransferConfig
from vllm.distributed.weight_transfer.clients import RayVLLMWeightSyncClient
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.executor import Executor

import wsync
from wsync.vllm import WsyncSender

PAUSE_TOKEN_THRESHOLD = 10
# How often the engine actor looks whether a request has reached the threshold (vLLM's example spins).
PAUSE_POLL_S = 0.005
# After the pause, outputs already sampled are still on their way to the requests' streams (vLLM's example: 5 s).
PAUSE_SETTLE_S = 1.0
# The stand-in for an RL objective (rlhf.py): raise the probability of this token over the rollouts.
TARGET_TOKEN = 7
LEARNING_RATE = 1e-4


class MyLLM(AsyncLLM):
    """vLLM's AsyncLLM with the two helpers of vLLM's example: a request that records where the pause fell, and a
    pause that waits until some request has PAUSE_TOKEN_THRESHOLD tokens."""

    def __init__(self, **kwargs):
        engine_args = AsyncEngineArgs(**kwargs)
        vllm_config = engine_args.create_engine_config()
        super().__init__(
            vllm_config=vllm_config,
            executor_class=Executor.get_class(vllm_config),
            log_requests=engine_args.enable_log_requests,
            log_stats=not engine_args.disable_log_stats,
        )
        self._generation_paused = False
        self._request_pause_flag = False

    async def do_generate(
        self, prompt_token_ids: list[int], sampling_params: SamplingParams
    ) -> tuple[RequestOutput, int]:
        """Returns (output, pause_token_index): the number of tokens that had streamed out when the pause took
        effect, as vLLM's example infers it (-1 if the request saw no pause)."""
        pause_token_index = -1
        prev_token_count = 0
        async for output in self.generate(
            {"prompt_token_ids": prompt_token_ids}, sampling_params, request_id=str(uuid.uuid4())
        ):
            cur_token_count = len(output.outputs[0].token_ids)
            if cur_token_count >= PAUSE_TOKEN_THRESHOLD:
                self._request_pause_flag = True
            if self._generation_paused and pause_token_index == -1:
                pause_token_index = prev_token_count
            prev_token_count = cur_token_count
        return output, pause_token_index

    def arm_pause(self) -> None:
        """Makes the next pause wait for a request of the batch about to start (the example's flags are one-shot)."""
        self._generation_paused = False
        self._request_pause_flag = False

    async def pause_after_n_tokens(self, mode: str, clear_cache: bool) -> None:
        while not self._request_pause_flag:
            await asyncio.sleep(PAUSE_POLL_S)
        await self.pause_generation(mode=mode, clear_cache=clear_cache)
        await asyncio.sleep(PAUSE_SETTLE_S)
        self._generation_paused = True


@ray.remote(num_cpus=1)
class TrainModel:
    """Ray actor that holds the training model and publishes its weights over wsync."""

    def __init__(self, model_path: str, bus: str):
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.old_model = None  # the weights the engine served before the update, for the validation
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=LEARNING_RATE)
        # "keep" is the round's pause mode on the bus, and the mode `sync` pauses vLLM with.
        self.sender = WsyncSender(bus, agent_id="trainer", channel="shm", pause_mode="keep")

    def init_weight_transfer(self, llm) -> None:
        self.sender.init(RayVLLMWeightSyncClient(llm), self.model.named_parameters())

    def train_step(self, prompts: list[list[int]], completions: list[list[int]]) -> float:
        self.old_model = copy.deepcopy(self.model)
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

    def sync_weights(self, llm, clear_cache: bool) -> dict:
        """Publishes the next version while the engine generates, then pauses it (keep), has vLLM load the
        version, and resumes it. Returns the version and how long generation was paused."""
        times = {}

        def pause(mode: str) -> None:
            times["published"] = time.monotonic()
            ray.get(llm.pause_after_n_tokens.remote(mode, clear_cache))
            times["paused"] = time.monotonic()

        def resume() -> None:
            ray.get(llm.resume_generation.remote())
            times["resumed"] = time.monotonic()

        start = time.monotonic()
        version = self.sender.sync(
            RayVLLMWeightSyncClient(llm), self.model.named_parameters(), pause=pause, resume=resume
        )
        return {
            "version": version,
            "publish_s": times["published"] - start,
            # The update itself, without PAUSE_SETTLE_S (the example's wait for outputs, not the engine's).
            "paused_s": times["resumed"] - times["paused"],
        }

    @torch.inference_mode()
    def continue_greedy(self, prompt: list[int], before: list[int], count: int, keep_old_cache: bool) -> list[int]:
        """`count` greedy tokens of the new model after prompt + before. With keep_old_cache, the KV cache of
        prompt + before[:-1] is the old model's, as in a request that vLLM froze and resumed; before[-1] was
        sampled before the swap, and its KV is computed by the new weights."""
        if keep_old_cache:
            cache = self.old_model(torch.tensor([prompt + before[:-1]]), use_cache=True).past_key_values
            inputs = torch.tensor([before[-1:]])
        else:
            cache, inputs = None, torch.tensor([prompt + before])
        tokens = []
        for _ in range(count):
            result = self.model(inputs, past_key_values=cache, use_cache=True)
            cache, inputs = result.past_key_values, result.logits[:, -1:].argmax(-1)
            tokens.append(int(inputs))
        return tokens

    def shutdown(self) -> None:
        self.sender.close()


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a Hugging Face checkpoint folder (default: a tiny random Qwen3)")
    parser.add_argument(
        "--new-tokens", type=int, default=200, help="tokens after the threshold: long enough to outlast the publish"
    )
    parser.add_argument(
        "--keep-kv-cache", action="store_true", help="pause with clear_cache=False: requests keep the old KV cache"
    )
    parser.add_argument("--bus", default="rlhf-async", help="the wsync bus (one coordinator per bus)")
    parser.add_argument("--report", help="write the outputs and checks to this JSON file")
    return parser.parse_args()


def spans_of(output: RequestOutput) -> list[tuple[str, int, int]]:
    return [(s.version, s.start, s.end) for s in output.outputs[0].weight_versions]


def main() -> int:
    arguments = parse_arguments()
    if arguments.model is None:
        import tiny_qwen3

        arguments.model = str(tiny_qwen3.save(Path(tempfile.mkdtemp(prefix="tiny-qwen3-"))))
    from tiny_qwen3 import PROMPTS

    with wsync.Coordinator(arguments.bus):
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            runtime_env={"env_vars": {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}},
        )
        train_model = TrainModel.remote(arguments.model, arguments.bus)
        llm = ray.remote(num_cpus=0)(MyLLM).remote(
            model=arguments.model,
            dtype="float32",
            skip_tokenizer_init=True,
            enforce_eager=True,
            max_model_len=2048,
            weight_transfer_config=WeightTransferConfig(backend="wsync"),
        )
        ray.get(train_model.init_weight_transfer.remote(llm))

        def greedy(max_tokens: int) -> SamplingParams:
            return SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, detokenize=False)

        # The previous batch: rollouts the trainer learns from while the engine generates the next one.
        previous = ray.get([llm.do_generate.remote(p, greedy(PAUSE_TOKEN_THRESHOLD)) for p in PROMPTS])
        rollouts = [list(output.outputs[0].token_ids) for output, _ in previous]

        # ── Phase 1: requests in flight while the weights change ──────────────
        total_tokens = PAUSE_TOKEN_THRESHOLD + arguments.new_tokens
        ray.get(llm.arm_pause.remote())
        gen_futures = [llm.do_generate.remote(p, greedy(total_tokens)) for p in PROMPTS]
        loss = ray.get(train_model.train_step.remote(PROMPTS, rollouts))
        clear_cache = not arguments.keep_kv_cache
        update = ray.get(train_model.sync_weights.remote(llm, clear_cache))
        results = ray.get(gen_futures)
        version = str(update["version"])
        print(f"version {version} published in {update['publish_s']:.2f} s while generating (loss {loss:.3f});")
        print(f"vLLM's load paused generation {update['paused_s']:.2f} s (and the example's {PAUSE_SETTLE_S} s wait)")

        # ── Phase 2: validate ─────────────────────────────────────────────────
        failures, report = [], {"update": update, "clear_cache": clear_cache, "requests": []}
        for prompt, (output, pause_index) in zip(PROMPTS, results):
            tokens = list(output.outputs[0].token_ids)
            spans = spans_of(output)
            # wsync's boundary: the first token of the new version, from the output itself.
            boundary = spans[1][1] if len(spans) == 2 else -1
            before, after = tokens[:boundary], tokens[boundary:]
            keep = ray.get(train_model.continue_greedy.remote(prompt, before, len(after), keep_old_cache=True))
            fresh = ray.get(train_model.continue_greedy.remote(prompt, before, len(after), keep_old_cache=False))
            references = {
                "vLLM's check: a fresh new model from prompt + tokens before": fresh,
                "the new model over the old model's KV cache": keep,
            }
            applies = list(references)[0 if clear_cache else 1]
            checks = {
                "in flight across the update": spans == [("default", 0, boundary), (version, boundary, total_tokens)],
                "vLLM's pause index is the span boundary": pause_index == boundary,
                f"after the swap: {applies}": after == references[applies],
            }
            print(f"  {prompt}: spans {spans}, vLLM's pause index {pause_index}")
            for name, passed in checks.items():
                print(f"    [{'PASS' if passed else 'FAIL'}] {name}")
                if not passed:
                    failures.append(f"{prompt}: {name}")
            other = list(references)[1 if clear_cache else 0]
            difference = next((i for i, (a, b) in enumerate(zip(after, references[other])) if a != b), None)
            print(
                f"    (after the swap vs {other}: "
                + ("equal)" if difference is None else f"differ from token {boundary + difference})")
            )
            report["requests"].append(
                {"prompt": prompt, "tokens": tokens, "spans": spans, "pause_index": pause_index, "checks": checks}
                | {"fresh_reference": fresh, "keep_reference": keep}
            )

        # Requests that start after the update are prefilled by the new weights alone.
        after_update = ray.get([llm.do_generate.remote(p, greedy(PAUSE_TOKEN_THRESHOLD)) for p in PROMPTS])
        new_tokens = [list(output.outputs[0].token_ids) for output, _ in after_update]
        expected = [
            ray.get(train_model.continue_greedy.remote(p, [], PAUSE_TOKEN_THRESHOLD, keep_old_cache=False))
            for p in PROMPTS
        ]
        checks = {
            "new requests: engine equals trainer": new_tokens == expected,
            "new requests: tagged with the version": all(
                spans_of(output) == [(version, 0, PAUSE_TOKEN_THRESHOLD)] for output, _ in after_update
            ),
            "engine serves the version": ray.get(llm.get_weight_version.remote()) == version,
        }
        for name, passed in checks.items():
            print(f"  [{'PASS' if passed else 'FAIL'}] {name}")
            if not passed:
                failures.append(name)
        report |= {"after_update": {"tokens": new_tokens, "expected": expected, "checks": checks}}

        ray.get(llm.shutdown.remote())
        ray.get(train_model.shutdown.remote())
        ray.shutdown()

    if arguments.report:
        Path(arguments.report).write_text(json.dumps(report | {"failures": failures}, indent=1))
    print("FAILED: " + "; ".join(failures) if failures else "PASSED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
