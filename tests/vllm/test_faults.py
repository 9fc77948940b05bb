"""Faults around a live offline engine with backend "wsync": whatever goes wrong, vLLM keeps serving the version it
had (checked token for token, and byte for byte on the tensors vLLM keeps as the checkpoint laid them out), says
why, and takes the next good version."""

from __future__ import annotations

import pytest
from conftest import GREEDY_TOKENS, PROMPTS, offline_generate, offline_load
from worker_probes import parameter_digests

import wsync

# An update for a version that never comes gives up after this long (the update info's timeout).
MISSING_VERSION_TIMEOUT_S = 3.0
EXTRA = "model.layers.0.mlp.not_in_vllm.weight"


def check_serving(llm, trainer, version: int) -> None:
    """vLLM serves exactly the trainer's `version`: greedy tokens, the label, and the bytes of every tensor vLLM
    keeps under the checkpoint's name (embeddings and norms here; on the CPU vLLM repacks the linear layers)."""
    tokens, spans = offline_generate(llm)
    assert tokens == trainer.ask("greedy", "greedy", prompts=PROMPTS, max_tokens=GREEDY_TOKENS)["tokens"]
    assert spans == [[(str(version), 0, GREEDY_TOKENS)]] * len(PROMPTS)
    live = llm.apply_model(parameter_digests)[0]
    expected = trainer.ask("digests", "digests")["digests"]
    plain = sorted(set(live) & set(expected))
    assert "model.embed_tokens.weight" in plain and "model.norm.weight" in plain, plain
    assert {name: live[name] for name in plain} == {name: expected[name] for name in plain}


def start(llm, coordinator, trainers, channel="shm"):
    trainer = trainers(coordinator.bus, channel)
    llm.init_weight_transfer_engine({"init_info": trainer.ask("init_info", "init_info")["info"]})
    trainer.ask("publish", "published", version=1)
    offline_load(llm, 1)
    check_serving(llm, trainer, 1)
    return trainer


def test_a_trainer_killed_mid_version_leaves_the_previous_version_serving(llm, coordinator, trainers):
    victim = start(llm, coordinator, trainers)
    victim.send("publish_then_die", version=2)
    assert victim.process.wait(30) < 0, "the trainer was to kill itself mid-transfer"
    with pytest.raises(Exception, match="version 2"):
        llm.start_weight_update()
        llm.update_weights({"update_info": {"version": 2, "timeout": MISSING_VERSION_TIMEOUT_S}})
    # Another trainer of the same model: at version 1 it must match what vLLM still serves.
    successor = trainers(coordinator.bus, "shm")
    check_serving_at(llm, successor, 1)
    successor.ask("publish", "published", version=2)
    offline_load(llm, 2)
    check_serving(llm, successor, 2)


def check_serving_at(llm, trainer, version: int) -> None:
    """check_serving for a trainer process that has not published: it steps its own model to `version` first."""
    trainer.ask("step", "stepped", version=version)
    check_serving(llm, trainer, version)


@pytest.mark.parametrize(
    "op, tensor", [("extra_tensor", EXTRA), ("wrong_shape", "model.layers.0.self_attn.q_proj.weight")]
)
def test_a_manifest_vllm_was_not_told_of_is_refused_naming_the_tensor(llm, coordinator, trainers, op, tensor):
    first = start(llm, coordinator, trainers)
    # The trainer that declared the manifest refuses another one itself, before any round begins.
    local = first.refused(op, version=2)
    assert local["type"] == "ManifestMismatchError" and tensor in local["message"], local
    first.close()
    # A trainer whose first manifest it is: vLLM's wsync worker refuses it before any byte moves.
    second = trainers(coordinator.bus, "shm")
    refusal = second.refused(op, version=2)
    assert refusal["type"] in ("RefusedError", "AbortedError") and tensor in refusal["message"], refusal
    second.close()
    # A trainer declares one manifest for its life: the good one comes from a third.
    third = trainers(coordinator.bus, "shm")
    check_serving_at(llm, third, 1)
    third.ask("publish", "published", version=2)
    offline_load(llm, 2)
    check_serving(llm, third, 2)


def test_an_init_naming_a_tensor_vllm_lacks_fails_naming_it(llm, coordinator, trainers):
    trainer = start(llm, coordinator, trainers)
    info = trainer.ask("init_info", "init_info")["info"]
    bad = {**info, "names": [*info["names"], "model.not_in_vllm.weight"]}
    bad["dtype_names"] = [*info["dtype_names"], "float32"]
    bad["shapes"] = [*info["shapes"], [4, 4]]
    with pytest.raises(Exception, match="model.not_in_vllm.weight"):
        llm.init_weight_transfer_engine({"init_info": bad})
    wrong = {**info, "shapes": [list(s) for s in info["shapes"]]}
    index = info["names"].index("model.norm.weight")
    wrong["shapes"][index] = [wrong["shapes"][index][0] + 1]
    with pytest.raises(Exception, match="model.norm.weight"):
        llm.init_weight_transfer_engine({"init_info": wrong})
    check_serving(llm, trainer, 1)


def test_a_coordinator_restarted_between_versions(llm, bus, trainers):
    with wsync.Coordinator(bus, heartbeat_interval=0.1, heartbeat_timeout=1.0, pause_timeout=10.0) as first:
        trainer = start(llm, first, trainers)
    with wsync.Coordinator(bus, heartbeat_interval=0.1, heartbeat_timeout=1.0, pause_timeout=10.0):
        trainer.ask("publish", "published", version=2)
        offline_load(llm, 2)
        check_serving(llm, trainer, 2)
