"""How sure the anchor is of its own segments, and how likely it finds another member's: the
evidence that sets the anchored policy's threshold (``policy.AGREE``).

    ./run python benchmarks/anchor_agree.py --task gsm8k --limit 6 --out /tmp/agree-gsm8k.json

It answers development examples with the anchored policy (the anchor and one cheaper
member, seed ``i`` for example ``i``) with every round contested: the anchor drafts every
round and every verifier scores every candidate, so each round gives the anchor's least
token log-prob of its own draft and of the other member's, and the candidate the contested
rule chose. Per threshold it reports the share of the anchor's own segments that pass (the
rounds it would write alone: the others are asked in the rest, which is the cost), and, for
the other member's drafts, the share that pass and how often a passing one is not the
contested rule's choice. Writes every round's numbers to ``--out``; ``--tables-from``
re-reads them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from pathlib import Path
from typing import Any
from unittest import mock

from specem_chain import Member, RequestSettings, open_request
from specem_chain.engine import config
from specem_chain.engine.policy import Anchor
from specem_chain.evaluation.tasks import TASKS

DATA = {
    "gsm8k": "benchmarks/data/gsm8k/train-500.jsonl",
    "instructions": "benchmarks/data/instructions-dev.jsonl",
    "reference": "benchmarks/data/reference-dev.jsonl",
}
THRESHOLDS = (-1.0, -1.5, -2.0, -2.5, -3.0, -3.5, -4.0, -5.0, -6.0)


def contested(learning_rate: float, anchor: int) -> Anchor:
    return Anchor(learning_rate, anchor=anchor, agree=1.0)  # no log-prob reaches 1


async def collect(args: argparse.Namespace) -> list[dict[str, Any]]:
    task = TASKS[args.task]
    examples = task.load(Path(args.data or DATA[args.task]), args.limit)
    members = [Member(source=args.anchor), Member(source=args.member)]
    anchor = members[0].label
    settings = RequestSettings(
        policy="anchor", anchor=anchor, max_tokens=args.max_tokens, repeat_penalty=1.0
    )
    rows = []
    for example in examples:
        messages = [{"role": "user", "content": example.prompt}]
        seeded = settings.model_copy(update={"seed": example.index})
        with mock.patch.object(config, "Anchor", contested):
            async with open_request(members, messages, seeded) as request:
                async for _ in request:
                    pass
        for event in request.answer.rounds:
            v = event.verification
            if v is None or not v.least:
                continue
            seat = v.verifiers.index(0)
            for k, drafter in enumerate(v.drafters):
                rows.append(
                    {
                        "example": example.index,
                        "round": event.round,
                        "own": drafter == 0,
                        "least": v.least[seat][k],
                        "chosen": event.candidates[k].text == event.segment
                        and event.winner == event.candidates[k].member,
                    }
                )
        print(f"example {example.index}: {len(request.answer.rounds)} rounds", flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    own = [r for r in rows if r["own"]]
    other = [r for r in rows if not r["own"]]

    def q(values: list[float], p: float) -> float:
        return statistics.quantiles(values, n=100)[int(p) - 1]

    lines = [
        f"{len(own)} contested rounds; the anchor's least token log-prob of its own draft: "
        f"p10 {q([r['least'] for r in own], 10):.2f}, p25 {q([r['least'] for r in own], 25):.2f}, "
        f"median {statistics.median(r['least'] for r in own):.2f}; of the other member's: "
        f"p25 {q([r['least'] for r in other], 25):.2f}, "
        f"median {statistics.median(r['least'] for r in other):.2f}",
        "",
        "| threshold | the anchor's own segments passing (written alone) "
        "| the other's passing | of those, not the contested rule's choice |",
        "|---|---|---|---|",
    ]
    for t in THRESHOLDS:
        passing = [r for r in other if r["least"] >= t]
        mine = sum(r["least"] >= t for r in own) / len(own)
        unchosen = sum(not r["chosen"] for r in passing) / len(passing) if passing else 0.0
        lines.append(f"| {t:g} | {mine:.0%} | {len(passing) / len(other):.0%} | {unchosen:.0%} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="gsm8k")
    parser.add_argument("--data")
    parser.add_argument("--limit", type=int, default=6)
    parser.add_argument("--anchor", default="qwen2.5-coder-1.5b")
    parser.add_argument("--member", default="qwen2.5-coder")
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tables-from", action="store_true", help="only re-read OUT")
    args = parser.parse_args()
    if not args.tables_from:
        args.out.write_text(json.dumps(asyncio.run(collect(args))) + "\n")
    print(table(json.loads(args.out.read_text())))


if __name__ == "__main__":
    main()
