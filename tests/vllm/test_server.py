"""vLLM's OpenAI-compatible server with backend "wsync", driven over HTTP as an RL trainer drives it: versions over
shm and tcp through `WsyncSender.sync` and vLLM's HTTP client, and through vLLM's own trainer factory."""

from __future__ import annotations

import pytest
from conftest import GREEDY_TOKENS, PROMPTS


def served_tokens(server) -> tuple[list[list[int]], list[list[tuple[str, int, int]]]]:
    choices = [server.generate(prompt, GREEDY_TOKENS) for prompt in PROMPTS]
    spans = [[(s["version"], s["start"], s["end"]) for s in choice["weight_versions"] or []] for choice in choices]
    return [choice["token_ids"] for choice in choices], spans


def check_version(server, trainer, version: int, previous: list[list[int]]) -> list[list[int]]:
    tokens, spans = served_tokens(server)
    expected = trainer.ask("greedy", "greedy", prompts=PROMPTS, max_tokens=GREEDY_TOKENS)["tokens"]
    assert tokens == expected, f"version {version}: the server's greedy tokens differ from the trainer's own model's"
    assert tokens != previous, f"version {version}: the server's outputs did not change"
    assert spans == [[(str(version), 0, GREEDY_TOKENS)]] * len(PROMPTS)
    assert server.get("/weight_info") == {"weight_version": str(version)}
    return tokens


@pytest.mark.parametrize("channel", ["shm", "tcp"])
def test_three_versions_reach_the_server_through_wsync_sender(server, coordinator, trainers, channel):
    trainer = trainers(coordinator.bus, channel)
    trainer.ask("init_http", "initialized", url=server.url)
    previous, _ = served_tokens(server)
    for version in (1, 2, 3):
        assert trainer.ask("sync", "synced", url=server.url, version=version)["version"] == version
        previous = check_version(server, trainer, version, previous)


def test_vllms_own_trainer_factory_drives_the_server(server, coordinator, trainers):
    trainer = trainers(coordinator.bus, "shm")
    ready = trainer.ask("factory_init", "factory_ready", url=server.url)
    assert ready["engine"] == "WsyncTrainerWeightTransferEngine"
    previous, _ = served_tokens(server)
    for version in (1, 2, 3):
        trainer.ask("factory_send", "factory_sent", version=version)
        previous = check_version(server, trainer, version, previous)
