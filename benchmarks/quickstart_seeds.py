"""How often the README's first command answers its question right, over seeds.

    ./run python benchmarks/quickstart_seeds.py --seeds 20 --answer 16

It reads the question from the README's first ``./run specem chat "..."`` line and answers
it as that command does (``specem chat``'s defaults, the embedded default unless
``--members`` or settings are given), once per seed 0..N-1, one after another. An answer is
right when its final number (as ``specem eval``'s GSM8K task reads it) is ``--answer``.
Prints each seed's final number, who wrote the answer's segments, and the count right.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections import Counter
from pathlib import Path

from specem_chain import SpecEMChatModel
from specem_chain.evaluation.tasks import extract_number

README = Path(__file__).parents[1] / "README.md"


def question() -> str:
    found = re.search(r'^\./run specem chat "([^"]+)"$', README.read_text(), re.MULTILINE)
    if found is None:
        raise SystemExit('the README has no ./run specem chat "..." line')
    return found[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--answer", required=True)
    parser.add_argument("-m", "--member", dest="members", action="append")
    parser.add_argument("--policy")
    args = parser.parse_args()
    settings = {"policy": args.policy} if args.policy else {}
    model = SpecEMChatModel(**({"members": args.members} if args.members else {}), **settings)
    asked = question()
    right, seconds = 0, []
    for seed in range(args.seeds):
        started = time.perf_counter()
        message = model.invoke(asked, seed=seed)
        seconds.append(time.perf_counter() - started)
        final = extract_number(str(message.content))
        right += final == args.answer
        wins = Counter(s["member"] for s in message.response_metadata["specem"]["segments"])
        print(f"seed {seed}: {final} ({dict(wins)}) {seconds[-1]:.1f} s", flush=True)
    print(
        f"{right} of {args.seeds} right ({args.answer}); median {statistics.median(seconds):.1f} s"
    )


if __name__ == "__main__":
    main()
