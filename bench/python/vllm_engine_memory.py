"""What backend "wsync" adds to a live vLLM engine's memory (docs/vllm.md): its worker's resident memory (RSS) before
the backend's init, after it (staging bound), after each update, and its peak during an update, against the model's
own checkpoint bytes. A CPU engine over shm, Qwen3's layout at a size where the copies stand out of the noise.

Run in the vLLM stage's environment (tools/vllm-venv.sh, the wsync wheel installed):
    VLLM_CPU_KVCACHE_SPACE=1 VLLM_ALLOW_INSECURE_SERIALIZATION=1 \
        build/vllm-venv/bin/python bench/python/vllm_engine_memory.py [--json PATH]
(apply_model sends the probes to the worker pickled, which vLLM allows only so)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

# Qwen3's layout (separate q/k/v and gate/up in the checkpoint, fused in vLLM) at about 100 M parameters.
CONFIG = {
    "vocab_size": 16384,
    "hidden_size": 768,
    "intermediate_size": 2048,
    "num_hidden_layers": 8,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "head_dim": 64,
}
UPDATES = 3

# The probes run in vLLM's worker: functions of an importable module, which pickle sends by name.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_worker_probes import reset_peak, worker_memory  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()

    import torch
    import transformers
    from vllm import LLM
    from vllm.config import WeightTransferConfig

    import wsync
    from wsync.vllm import LLMClient, WsyncSender

    config = transformers.Qwen3Config(
        **CONFIG, max_position_embeddings=2048, tie_word_embeddings=False, torch_dtype="float32"
    )
    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(config).to(torch.float32).eval()
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    bus = f"vllm-memory-{os.getpid()}"
    with tempfile.TemporaryDirectory() as folder, wsync.Coordinator(bus):
        model.save_pretrained(folder, safe_serialization=True)
        llm = LLM(
            model=folder,
            dtype="float32",
            skip_tokenizer_init=True,
            enforce_eager=True,
            max_model_len=512,
            weight_transfer_config=WeightTransferConfig(backend="wsync"),
        )
        client = LLMClient(llm)
        rows = [("engine started", llm.apply_model(worker_memory)[0])]
        with WsyncSender(bus, channel="shm") as sender:
            sender.init(client, model.named_parameters())
            rows.append(("after init", llm.apply_model(worker_memory)[0]))
            peaks = []
            for version in range(1, UPDATES + 1):
                with torch.no_grad():
                    for parameter in model.parameters():
                        parameter.mul_(0.99)
                llm.apply_model(reset_peak)
                before = llm.apply_model(worker_memory)[0]["VmRSS"]
                started = time.monotonic()
                sender.sync(client, model.named_parameters())
                seconds = time.monotonic() - started
                after = llm.apply_model(worker_memory)[0]
                peaks.append({"version": version, "before": before, "peak": after["VmHWM"], "seconds": seconds})
                rows.append((f"after update {version}", after))
    base = rows[0][1]["VmRSS"]
    result = {
        "wsync": wsync.__file__,
        "model_bytes": model_bytes,
        "rss": {name: values["VmRSS"] for name, values in rows},
        "extra_after_init": rows[1][1]["VmRSS"] - base,
        "extra_after_updates": rows[-1][1]["VmRSS"] - base,
        "updates": peaks,
    }
    mib = 1 << 20
    print(f"model {model_bytes / mib:.1f} MiB (checkpoint bytes, float32)")
    for name, values in rows:
        print(f"  {name:18s} RSS {values['VmRSS'] / mib:8.1f} MiB  (+{(values['VmRSS'] - base) / mib:7.1f})")
    for peak in peaks:
        extra = peak["peak"] - peak["before"]
        print(
            f"  update {peak['version']}: peak {extra / mib:7.1f} MiB over the RSS before it "
            f"({extra / model_bytes:.2f}x the model), {peak['seconds'] * 1000:.0f} ms"
        )
    print(
        f"  resident extra after init {result['extra_after_init'] / model_bytes:.2f}x the model, after "
        f"{UPDATES} updates {result['extra_after_updates'] / model_bytes:.2f}x"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    sys.exit(main())
