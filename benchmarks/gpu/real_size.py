"""Part (b) of the GPU check: members with random weights at real sizes, built on the device
from their configurations (the numbers of Qwen2.5-1.5B-Instruct's and Qwen2.5-7B-Instruct's
config.json, written here: no hub, no weights), timed in one run: each member alone, the two
as an ensemble (policy "pool", the default) and under the anchored policy (the 7B anchors),
and each member decoding alone with transformers' ``generate``.

Speed does not depend on the weights' values, but random weights draft nonsense and end
their turn at random. So every answer is made the same length: the members' logits for the
tokens that end a turn, for the special and added tokens, and for the rows past the real
vocabulary (padding) are set to -inf as the model computes them, and every answer runs to
``max_tokens`` (its finish reason is checked to be "length").

The ensembles run on the engine and sessions a request uses (``run_rounds`` over
``TransformersSession`` seats), with the members' default sampling; the members are built in
memory, not loaded from folders (saving and loading 18 GB of random weights would take the
run's time).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoModelForCausalLM, Qwen2Config

from specem_chain.backends.transformers import TransformersBackend
from specem_chain.benchmark.speed import PROMPT
from specem_chain.engine import EngineConfig, RoundEvent, Seat, run_rounds
from specem_chain.engine.types import Sampling

_QWEN25 = {
    "max_position_embeddings": 32_768,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0},
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
}
SHAPES: dict[str, dict[str, dict[str, Any]]] = {
    "real": {
        "qwen2.5-1.5b": {
            **_QWEN25,
            "vocab_size": 151_936,
            "hidden_size": 1_536,
            "intermediate_size": 8_960,
            "num_hidden_layers": 28,
            "num_attention_heads": 12,
            "num_key_value_heads": 2,
            "tie_word_embeddings": True,
        },
        "qwen2.5-7b": {
            **_QWEN25,
            "vocab_size": 152_064,
            "hidden_size": 3_584,
            "intermediate_size": 18_944,
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "tie_word_embeddings": False,
        },
    },
    # the same code at a size a CPU runs in seconds, so that it cannot break unseen
    "tiny": {
        "qwen2.5-1.5b": {
            **_QWEN25,
            "vocab_size": 512,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "tie_word_embeddings": True,
        },
        "qwen2.5-7b": {
            **_QWEN25,
            "vocab_size": 512,
            "hidden_size": 96,
            "intermediate_size": 192,
            "num_hidden_layers": 3,
            "num_attention_heads": 6,
            "num_key_value_heads": 2,
            "tie_word_embeddings": False,
        },
    },
}
SMALL, LARGE = "qwen2.5-1.5b", "qwen2.5-7b"
FIXED_LENGTH = (
    "Random weights: the logits of end-of-turn, special, added and padding tokens are set "
    "to -inf, so every draft runs its full window and every answer to max_tokens."
)


def build_member(
    name: str, shape: dict[str, Any], tokenizer: Any, device: str
) -> TransformersBackend:
    """A member of ``shape`` with random weights, made on ``device`` (bfloat16 on CUDA,
    float32 on the CPU), whose turn never ends (:func:`never_ending`)."""
    config = Qwen2Config(
        **shape,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    backend = TransformersBackend(model, tokenizer, name=name)
    never_ending(backend, shape["vocab_size"])
    return backend


def never_ending(backend: TransformersBackend, vocab_size: int) -> None:
    """Set the model's logits of the tokens that end a turn, of special and added tokens,
    and of padding (llama.cpp's converter pads a vocabulary to the embedding's rows with
    ``[PADn]`` tokens; rows past the tokenizer's have no token) to -inf."""
    tokenizer = backend.tokenizer
    banned = set(backend.end_of_turn) | set(tokenizer.all_special_ids)
    banned |= set(tokenizer.added_tokens_decoder) | set(range(len(tokenizer), vocab_size))
    banned |= {i for token, i in tokenizer.get_vocab().items() if token.startswith("[PAD")}
    index = torch.tensor(sorted(banned), device=backend.device)

    def mask(module: Any, args: Any, logits: torch.Tensor) -> torch.Tensor:
        return logits.index_fill(-1, index, float("-inf"))

    backend.model.get_output_embeddings().register_forward_hook(mask)


@dataclass(frozen=True)
class System:
    """What is timed: members in an ensemble under a policy, or one member's ``generate``."""

    name: str
    members: tuple[TransformersBackend, ...]
    policy: str = "pool"
    anchor: str | None = None
    generate: bool = False


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


async def answer(system: System, tokens: int, seed: int) -> dict[str, Any]:
    """One answer of ``tokens`` tokens, timed from opening the sessions (reading the
    prompt) to the last round."""
    device = system.members[0].device
    config = EngineConfig(max_tokens=tokens, seed=seed, policy=system.policy, anchor=system.anchor)
    synchronize(device)
    start = time.perf_counter()
    sessions = [await m.open(PROMPT) for m in system.members]
    seats = [Seat(m.name, s) for m, s in zip(system.members, sessions)]
    first, events = 0.0, []
    event: RoundEvent
    async for event in run_rounds(seats, config):
        first = first or time.perf_counter() - start
        events.append(event)
    synchronize(device)
    wall = time.perf_counter() - start
    for session in sessions:
        await session.aclose()
    return {
        "wall_s": wall,
        "tokens": events[-1].answer_tokens,
        "first_segment_s": first,
        "rounds": len(events),
        "rounds_one_verifier": sum(len(e.verifiers) == 1 for e in events),
        "finish_reason": events[-1].finish_reason,
    }


def generated(backend: TransformersBackend, tokens: int, seed: int) -> dict[str, Any]:
    """The member decoding ``tokens`` tokens alone with ``generate`` (KV cache, the
    members' default sampling), timed with reading the prompt."""
    sampling = Sampling()
    ids = torch.tensor([backend.encode(backend.template.render(PROMPT))], device=backend.device)
    torch.manual_seed(seed)
    synchronize(backend.device)
    start = time.perf_counter()
    with torch.inference_mode():
        out = backend.model.generate(
            ids,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            do_sample=True,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            repetition_penalty=sampling.repeat_penalty,
            pad_token_id=backend.turn_end,
        )
    synchronize(backend.device)
    made = out.shape[1] - ids.shape[1]
    return {"wall_s": time.perf_counter() - start, "tokens": made, "finish_reason": "length"}


def run(system: System, tokens: int, seed: int) -> dict[str, Any]:
    """One timed run of ``system``, with the device's peak memory over it."""
    device = system.members[0].device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    if system.generate:
        result = generated(system.members[0], tokens, seed)
    else:
        result = asyncio.run(answer(system, tokens, seed))
    if device.type == "cuda":
        result["peak_gpu_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return result


def systems(small: TransformersBackend, large: TransformersBackend) -> list[System]:
    return [
        System(f"{small.name} alone", (small,)),
        System(f"{large.name} alone", (large,)),
        System(f"{small.name} generate", (small,), generate=True),
        System(f"{large.name} generate", (large,), generate=True),
        System("ensemble (pool)", (large, small)),
        System(f"anchored ({large.name} anchors)", (large, small), "anchor", large.name),
    ]


def measure(
    small: TransformersBackend,
    large: TransformersBackend,
    tokens: int,
    repeats: int,
    seconds: float,
    progress: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """Every system once briefly (warm-up, not kept), then ``repeats`` timed runs of each,
    one of every system per repeat (seeds 0, 1, ...), each a fixed ``tokens`` long; a
    repeat after the first starts only if, taking as long as the one before, it ends within
    ``seconds`` of the first's start. ``progress`` gets the figures after every run."""
    timed = systems(small, large)
    for system in timed:
        run(system, min(tokens, 2 * EngineConfig().window), seed=0)
    runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in timed}
    started = last = time.monotonic()
    for seed in range(repeats):
        now = time.monotonic()
        if seed and 2 * now - last - started > seconds:
            break
        last = now
        for system in timed:
            runs[system.name].append(run(system, tokens, seed))
            progress(figures(timed, runs, tokens, small.name, large.name))
    return figures(timed, runs, tokens, small.name, large.name)


def figures(
    timed: list[System],
    runs: dict[str, list[dict[str, Any]]],
    tokens: int,
    small: str,
    large: str,
) -> dict[str, Any]:
    """Each system's medians over its runs so far, and the ensembles' overhead ratios: their
    time per answer token over the slower member's alone (the 7B's, through the same engine)
    and over both members' alone added up."""
    rows = []
    alone: dict[str, float] = {}
    for system in timed:
        done = runs[system.name]
        if not done:
            continue
        per_token = statistics.median(r["wall_s"] / r["tokens"] for r in done)
        peaks = [r["peak_gpu_gib"] for r in done if "peak_gpu_gib" in r]
        row: dict[str, Any] = {
            "system": system.name,
            "members": [m.name for m in system.members],
            "policy": "generate" if system.generate else system.policy,
            "runs": len(done),
            "answer_tokens": statistics.median(r["tokens"] for r in done),
            "finish_reasons": sorted({r["finish_reason"] for r in done}),
            "tokens_per_s": 1 / per_token,
            "seconds_per_token": per_token,
            "first_segment_s": None
            if system.generate
            else statistics.median(r["first_segment_s"] for r in done),
            "peak_gpu_gib": max(peaks) if peaks else None,
            "each_run": done,
        }
        if len(system.members) == 1 and not system.generate:
            alone[system.members[0].name] = per_token
        if len(system.members) > 1 and small in alone and large in alone:
            row["overhead_vs_slower_alone"] = per_token / max(alone[small], alone[large])
            row["overhead_vs_both_alone"] = per_token / (alone[small] + alone[large])
        if system.policy == "anchor":
            rounds = sum(r["rounds"] for r in done)
            row["share_of_rounds_anchor_alone"] = (
                sum(r["rounds_one_verifier"] for r in done) / rounds
            )
        rows.append(row)
    return {"tokens": tokens, "window": EngineConfig().window, "rows": rows}
