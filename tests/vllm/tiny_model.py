"""A tiny Qwen3 made from a config at test time (no hub, no tokenizer): what the vLLM stage serves and trains.

The same model on both sides: the trainer is Hugging Face's Qwen3ForCausalLM in float32, vLLM loads the checkpoint
it saved, and each version is that model with its weights moved by a seeded step, so the trainer can say which
greedy tokens vLLM must produce after the version lands.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

VOCAB = 512
HIDDEN = 64
LAYERS = 2
HEADS = 2
KV_HEADS = 1
HEAD_DIM = 64
INTERMEDIATE = 128
MAX_POSITIONS = 2048


def config() -> transformers.Qwen3Config:
    return transformers.Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=False,
        torch_dtype="float32",
        bos_token_id=1,
        eos_token_id=2,
    )


def model(seed: int = 0) -> transformers.Qwen3ForCausalLM:
    """The trainer's model, initialised from `seed`, in evaluation mode."""
    torch.manual_seed(seed)
    made = transformers.Qwen3ForCausalLM(config()).to(torch.float32)
    return made.eval()


def save(directory: Path, seed: int = 0) -> Path:
    """Writes the checkpoint vLLM starts from (config.json and model.safetensors) and returns its folder."""
    directory.mkdir(parents=True, exist_ok=True)
    model(seed).save_pretrained(directory, safe_serialization=True)
    return directory


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
