"""A tiny Qwen3 made from a config at test time (no hub, no tokenizer): what the vLLM stage serves and trains.

The same model on both sides: the trainer is Hugging Face's Qwen3ForCausalLM in float32, vLLM loads the checkpoint
it saved, and each version is that model with its weights moved by a seeded step, so the trainer can say which
greedy tokens vLLM must produce after the version lands.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import transformers

# One model for the examples and the tests: examples/vllm/tiny_qwen3.py makes it.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "vllm"))
from tiny_qwen3 import config, model, save

__all__ = ["config", "greedy", "model", "save", "step"]


@torch.no_grad()
def step(made: transformers.Qwen3ForCausalLM, version: int) -> None:
    """Moves every weight by a step seeded by `version`: large enough that greedy outputs change between versions."""
    generator = torch.Generator().manual_seed(1000 + version)
    for parameter in made.parameters():
        parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.5 * parameter.std().clamp(min=0.02))


@torch.no_grad()
def greedy(made: transformers.Qwen3ForCausalLM, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """The trainer's own greedy continuation of each prompt (token ids), as vLLM's temperature-0 sampling gives."""
    outputs = []
    for prompt in prompts:
        ids = torch.tensor([prompt])
        for _ in range(max_tokens):
            logits = made(ids).logits[0, -1]
            ids = torch.cat([ids, logits.argmax().view(1, 1)], dim=1)
        outputs.append(ids[0, len(prompt) :].tolist())
    return outputs
