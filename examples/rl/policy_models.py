"""The policies of wsync's RL examples: Hugging Face causal LMs built from a config (no download), randomly
initialised from a seed, made into new versions by a few optimizer steps, and compared byte for byte."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable

import torch

__all__ = ["MODELS", "build", "train_steps", "digests", "prompts", "save_state", "load_state", "parameter_bytes"]

# name -> architecture and config. The Qwen3 ones are the real models' shapes; where this transformers has no
# Qwen3 (before 4.51) they fall back to Llama, whose layers differ only by Qwen3's q/k norms.
MODELS = {
    # seconds on a CPU: the tests of the examples in CI
    "tiny": (
        "llama",
        dict(
            vocab_size=512,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
        ),
    ),
    # a few hundred MB in fp32: the GPU tests
    "qwen3-small": (
        "qwen3",
        dict(
            vocab_size=8192,
            hidden_size=512,
            intermediate_size=1536,
            num_hidden_layers=8,
            num_attention_heads=8,
            num_key_value_heads=4,
            head_dim=64,
            max_position_embeddings=2048,
        ),
    ),
    # Qwen3-0.6B's and Qwen3-1.7B's shapes (embeddings tied to the LM head): the timing table
    "qwen3-0.6b": (
        "qwen3",
        dict(
            vocab_size=151936,
            hidden_size=1024,
            intermediate_size=3072,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            max_position_embeddings=4096,
            tie_word_embeddings=True,
        ),
    ),
    "qwen3-1.7b": (
        "qwen3",
        dict(
            vocab_size=151936,
            hidden_size=2048,
            intermediate_size=6144,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            max_position_embeddings=4096,
            tie_word_embeddings=True,
        ),
    ),
}


def config_for(name: str):
    import transformers

    if name not in MODELS:
        raise ValueError(f"model '{name}': use one of {', '.join(MODELS)}")
    arch, values = MODELS[name]
    values = dict(values)
    if arch == "qwen3" and not hasattr(transformers, "Qwen3Config"):
        arch = "llama"
    if arch == "llama":
        if not _llama_takes_head_dim(transformers):
            values.pop("head_dim", None)
        return transformers.LlamaConfig(attn_implementation="eager", **values)
    return transformers.Qwen3Config(attn_implementation="eager", **values)


def _llama_takes_head_dim(transformers) -> bool:
    import inspect

    return "head_dim" in inspect.signature(transformers.LlamaConfig.__init__).parameters


def build(name: str, seed: int, device="cpu", dtype=torch.float32):
    """The model `name` with weights drawn from `seed` on the CPU (the same bytes in every process and on every
    machine with this torch and transformers), moved to `device`, in eval mode."""
    import transformers

    config = config_for(name)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    return model.to(device=device, dtype=dtype).eval()


def train_steps(model, steps: int, seed: int, lr: float = 1e-3, batch: int = 4, length: int = 32) -> list[float]:
    """`steps` AdamW steps on a language-modelling loss over random tokens drawn from `seed`: a new version of the
    policy, as an RL step would make one. Returns the losses."""
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    vocab = model.config.vocab_size
    losses = []
    model.train()
    for _ in range(steps):
        ids = torch.randint(0, vocab, (batch, length), generator=generator).to(device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach().item())
    model.eval()
    del optimizer
    return losses


def parameter_bytes(tensor: torch.Tensor) -> bytes:
    return tensor.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()


def digests(named: Iterable[tuple[str, torch.Tensor]]) -> dict[str, str]:
    """name -> SHA-256 of the tensor's bytes: two processes compare their weights byte for byte through these."""
    return {name: hashlib.sha256(parameter_bytes(tensor)).hexdigest() for name, tensor in named}


def save_state(model, path) -> None:
    torch.save({name: tensor.detach().cpu() for name, tensor in model.named_parameters()}, path)


def load_state(model, path) -> None:
    state = torch.load(path)
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            tensor.copy_(state[name])


def prompts(count: int, vocab: int, seed: int, shortest: int = 4, longest: int = 12) -> list[list[int]]:
    """`count` prompts of random tokens (1 .. vocab-1: 0 is the engine's padding) of varied lengths."""
    draw = random.Random(seed)
    return [[draw.randrange(1, vocab) for _ in range(draw.randint(shortest, longest))] for _ in range(count)]
