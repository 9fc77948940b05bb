"""A tiny random Qwen3 checkpoint, so the examples run anywhere without a hub download (and without a tokenizer:
the prompts are token ids). Pass `--model PATH` to an example to use a real checkpoint instead."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

# Token ids the examples prompt with: any ids below the tiny vocabulary's 512.
PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [300, 4, 77, 12, 9], [42, 43]]


def config() -> transformers.Qwen3Config:
    """A 2-layer Qwen3 in float32, about 1 MB (vLLM's CPU attention takes head sizes from 32 up)."""
    return transformers.Qwen3Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        torch_dtype="float32",
        bos_token_id=1,
        eos_token_id=2,
    )


def model(seed: int = 0) -> transformers.Qwen3ForCausalLM:
    """The model at `seed`, in float32 and evaluation mode."""
    torch.manual_seed(seed)
    return transformers.Qwen3ForCausalLM(config()).to(torch.float32).eval()


def save(directory: Path, seed: int = 0) -> Path:
    """Writes config.json and model.safetensors of model(seed) and returns the folder."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    model(seed).save_pretrained(directory, safe_serialization=True)
    return Path(directory)
