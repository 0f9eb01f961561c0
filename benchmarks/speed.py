"""Speed of the ensemble against its members' own decoding.

    ./run python benchmarks/speed.py [--lengths 64 256] [--repeats 3] [--json]

For each answer length N it measures, on the embedded default ensemble (window 10, seeded):
- ensemble tokens/s (accepted answer tokens per second of wall time);
- overhead ratio: ensemble time per answer token divided by the sum, over members, of each
  member's own time per token when it decodes N tokens alone with ``model.generate`` (KV
  cache, same sampling), measured in the same run;
- first-segment latency: from the request to the first accepted segment (models loaded);
- the mean time per round spent drafting, verifying and accepting.
Models are loaded before timing; every figure is the median over the repeats.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import torch

from specem_chain.defaults import DEFAULT_MEMBERS
from specem_chain.engine import EngineConfig
from specem_chain.ensemble import answer_rounds, load_backend
from specem_chain.members import Member, Sampling

PROMPT = [
    {
        "role": "user",
        "content": "Write a detailed, step-by-step explanation of how a bicycle works, "
        "covering the frame, wheels, gears, chain, brakes and steering.",
    }
]


async def ensemble_run(members: list[Member], length: int, seed: int) -> dict[str, float]:
    config = EngineConfig(max_tokens=length, seed=seed)
    start = time.perf_counter()
    first, rounds, tokens = None, [], 0
    async for event, _ in answer_rounds(members, PROMPT, config):
        first = first or time.perf_counter() - start
        rounds.append(event.timing)
        tokens = event.answer_tokens
    wall = time.perf_counter() - start
    return {
        "wall_s": wall,
        "tokens": tokens,
        "first_segment_s": first,
        "draft_s": statistics.fmean(r.draft_s for r in rounds),
        "verify_s": statistics.fmean(r.verify_s for r in rounds),
        "accept_s": statistics.fmean(r.accept_s for r in rounds),
    }


def solo_seconds_per_token(member: Member, length: int, seed: int) -> float:
    """A member's own decoding: ``generate`` for exactly ``length`` new tokens."""
    backend = load_backend(member)
    ids, _ = backend.render(PROMPT)
    sampling: Sampling = member.sampling
    torch.manual_seed(seed)
    start = time.perf_counter()
    with torch.inference_mode():
        backend.model.generate(
            torch.tensor([ids]),
            max_new_tokens=length,
            min_new_tokens=length,
            do_sample=True,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            pad_token_id=backend.tokenizer.pad_token_id or backend.tokenizer.eos_token_id,
        )
    return (time.perf_counter() - start) / length


def measure(lengths: list[int], repeats: int) -> dict[str, object]:
    members = [Member(source=name) for name in DEFAULT_MEMBERS]
    for member in members:
        load_backend(member)
    rows = []
    for length in lengths:
        runs = [asyncio.run(ensemble_run(members, length, seed)) for seed in range(repeats)]
        solo = {
            m.label: statistics.median(
                solo_seconds_per_token(m, length, seed) for seed in range(repeats)
            )
            for m in members
        }
        per_token = [r["wall_s"] / r["tokens"] for r in runs]
        rows.append(
            {
                "length": length,
                "answer_tokens": statistics.median(r["tokens"] for r in runs),
                "tokens_per_s": statistics.median(1 / p for p in per_token),
                "overhead_ratio": statistics.median(per_token) / sum(solo.values()),
                "first_segment_s": statistics.median(r["first_segment_s"] for r in runs),
                "round_draft_s": statistics.median(r["draft_s"] for r in runs),
                "round_verify_s": statistics.median(r["verify_s"] for r in runs),
                "round_accept_s": statistics.median(r["accept_s"] for r in runs),
                "solo_tokens_per_s": {name: 1 / s for name, s in solo.items()},
            }
        )
    return {"backend": "transformers", "members": [m.label for m in members], "rows": rows}


def table(result: dict[str, object]) -> str:
    lines = [
        "| answer tokens | tokens/s | overhead ratio | first segment (s) "
        "| per round: draft / verify / accept (s) | solo tokens/s |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        solo = ", ".join(f"{k} {v:.1f}" for k, v in r["solo_tokens_per_s"].items())
        lines.append(
            f"| {r['length']} (got {r['answer_tokens']:.0f}) | {r['tokens_per_s']:.2f} "
            f"| {r['overhead_ratio']:.2f} | {r['first_segment_s']:.2f} "
            f"| {r['round_draft_s']:.2f} / {r['round_verify_s']:.2f} / "
            f"{r['round_accept_s']:.2f} | {solo} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.lengths, args.repeats)
    print(json.dumps(result, indent=2) if args.json else table(result))


if __name__ == "__main__":
    main()
