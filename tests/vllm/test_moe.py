"""A Qwen3 MoE layout (a tiny one, made from a config) in a live offline engine: where vLLM's load_weights puts each
checkpoint tensor (the placement probe: experts stacked into w13/w2 by expert, attention fused), and a version
from wsync served token for token as the trainer's own model computes it."""

from __future__ import annotations

import pytest
import tiny_model
import torch
import transformers
from conftest import GREEDY_TOKENS, PROMPTS, engine_arguments, offline_generate, offline_load
from worker_probes import engine_placements, parameter_digests


def moe_config() -> transformers.Qwen3MoeConfig:
    dense = tiny_model.config()
    return transformers.Qwen3MoeConfig(
        vocab_size=dense.vocab_size,
        hidden_size=dense.hidden_size,
        intermediate_size=dense.intermediate_size,
        moe_intermediate_size=64,
        num_experts=4,
        num_experts_per_tok=2,
        num_hidden_layers=dense.num_hidden_layers,
        num_attention_heads=dense.num_attention_heads,
        num_key_value_heads=dense.num_key_value_heads,
        head_dim=dense.head_dim,
        max_position_embeddings=dense.max_position_embeddings,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    from vllm import LLM
    from vllm.config import WeightTransferConfig

    torch.manual_seed(0)
    model = transformers.Qwen3MoeForCausalLM(moe_config()).to(torch.float32).eval()
    folder = tmp_path_factory.mktemp("tiny-qwen3-moe")
    model.save_pretrained(folder, safe_serialization=True)
    engine = LLM(**engine_arguments(folder), weight_transfer_config=WeightTransferConfig(backend="wsync"))
    yield model, engine
    engine.llm_engine.engine_core.shutdown()


def test_a_qwen3_moe_version_is_placed_and_served(moe, coordinator):
    from wsync.vllm import LLMClient, WsyncSender

    model, llm = moe
    with WsyncSender(coordinator.bus, channel="shm") as sender:
        sender.init(LLMClient(llm), model.named_parameters())
        placements = llm.collective_rpc(engine_placements)[0]
        layer = "model.layers.0.mlp.experts"
        # The checkpoint's experts, one 3-D tensor per projection, go into vLLM's stacked expert weights by expert.
        assert placements[f"{layer}.gate_up_proj"] == [[f"{layer}.routed_experts.w13_weight"], False]
        assert placements[f"{layer}.down_proj"] == [[f"{layer}.routed_experts.w2_weight"], False]
        assert placements["model.layers.0.self_attn.q_proj.weight"][1] is False
        assert placements["model.layers.0.self_attn.o_proj.weight"] == [
            ["model.layers.0.self_attn.o_proj.weight"],
            True,
        ]
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(torch.randn(parameter.shape) * 0.5 * parameter.std().clamp(min=0.02))
        sender.publish(model.named_parameters(), 1)
    offline_load(llm, 1)
    tokens, spans = offline_generate(llm)
    assert spans == [[("1", 0, GREEDY_TOKENS)]] * len(PROMPTS)
    # vLLM's fused MoE kernel on the CPU sums the experts in another order than Hugging Face's: a near-tie can flip
    # a later greedy token, so the tokens are compared at the first step, and the bytes where vLLM keeps them whole.
    assert [t[0] for t in tokens] == [t[0] for t in tiny_model.greedy(model, PROMPTS, 1)]
    live = llm.apply_model(parameter_digests)[0]
    expected = parameter_digests(model)
    kept = sorted(set(live) & set(expected))
    assert {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"} <= set(kept), kept
    assert {name: live[name] for name in kept} == {name: expected[name] for name in kept}
