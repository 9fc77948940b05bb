"""vLLM's offline engine (`LLM`) with backend "wsync": versions from a trainer process over shm and over tcp."""

from __future__ import annotations

import pytest
from conftest import GREEDY_TOKENS, PROMPTS, offline_generate, offline_load
from worker_probes import engine_placements


@pytest.mark.parametrize("channel", ["shm", "tcp"])
def test_three_versions_reach_the_offline_engine(llm, coordinator, trainers, channel):
    trainer = trainers(coordinator.bus, channel)
    llm.init_weight_transfer_engine({"init_info": trainer.ask("init_info", "init_info")["info"]})
    previous, _ = offline_generate(llm)
    for version in (1, 2, 3):
        trainer.ask("publish", "published", version=version)
        offline_load(llm, version)
        tokens, spans = offline_generate(llm)
        expected = trainer.ask("greedy", "greedy", prompts=PROMPTS, max_tokens=GREEDY_TOKENS)["tokens"]
        assert tokens == expected, f"version {version}: vLLM's greedy tokens differ from the trainer's own model's"
        assert tokens != previous, f"version {version}: vLLM's outputs did not change"
        assert spans == [[(str(version), 0, GREEDY_TOKENS)]] * len(PROMPTS)
        assert llm.get_weight_version() == str(version)
        previous = tokens


def test_the_placement_probe_finds_qwen3s_fused_and_whole_tensors(llm, coordinator, trainers):
    trainer = trainers(coordinator.bus, "shm")
    llm.init_weight_transfer_engine({"init_info": trainer.ask("init_info", "init_info")["info"]})
    placements = llm.collective_rpc(engine_placements)[0]
    layer = "model.layers.0"
    fused = {f"{layer}.self_attn.{p}_proj.weight": f"{layer}.self_attn.qkv_proj.weight" for p in ("q", "k", "v")} | {
        f"{layer}.mlp.{p}_proj.weight": f"{layer}.mlp.gate_up_proj.weight" for p in ("gate", "up")
    }
    for name, parameter in fused.items():
        assert placements[name] == [[parameter], False], (name, placements[name])
    whole = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", f"{layer}.self_attn.o_proj.weight"]
    whole += [f"{layer}.mlp.down_proj.weight", f"{layer}.input_layernorm.weight", f"{layer}.self_attn.q_norm.weight"]
    for name in whole:
        assert placements[name] == [[name], True], (name, placements[name])
