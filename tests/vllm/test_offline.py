"""vLLM's offline engine (`LLM`) with backend "wsync": versions from a trainer process over shm and over tcp."""

from __future__ import annotations

import pytest
from conftest import GREEDY_TOKENS, PROMPTS, offline_generate, offline_load


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
