"""How long task-level feedback takes to learn a task: the warm-up, counted per run.

    ./run python benchmarks/warmup.py "SYSTEM" stored=DIR shuffle:1=DIR shuffle:2=DIR

SYSTEM is a variant with ``feedback=task`` and a gate (``specem[policy=pool,gate=0.5,
feedback=task]``); each run is ``LABEL=DIR``, a ``specem eval`` results folder that holds its
answers, in the order they were given. For each run and member: the answer in which the
member first rested (its starting task weight below gate / K, so it did not draft), how many
answers it rested in, and how many it wrote a segment of; and the system's headline metric
on the first 10 answers and on all. Prints a markdown table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specem_chain.evaluation.run import read_run
from specem_chain.evaluation.systems import variant
from specem_chain.evaluation.tasks import TASKS

FIRST = 10


def rows(system: str, label: str, folder: Path) -> list[str]:
    """One markdown row per member for one run."""
    gate = (variant(system) or {}).get("gate", 0.0)
    manifest, store = read_run(folder)
    task = TASKS[manifest["task"]]
    answers = [r for r in store.records.values() if r["system"] == system]
    if not answers:
        raise SystemExit(f"{folder} has no answers of {system!r}")
    metric = task.metrics[0]
    scores = [r["metrics"][metric] for r in answers]
    first = sum(scores[:FIRST]) / min(FIRST, len(scores))
    quality = f"{first:.2f} / {sum(scores) / len(scores):.2f}"
    starts = [r["details"]["start_weights"] for r in answers]
    out = []
    for member in starts[0]:
        rested = [i for i, w in enumerate(starts, 1) if w[member] < gate / len(w)]
        wrote = sum(1 for r in answers if r["details"]["wins"].get(member, 0))
        first_rest = str(rested[0]) if rested else "never"
        out.append(
            f"| {label} | {len(answers)} | {quality} | {member} | {first_rest} | "
            f"{len(rested)} | {wrote} |"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("system", help="The feedback variant's name, as specem eval ran it.")
    parser.add_argument("runs", nargs="+", metavar="LABEL=DIR")
    args = parser.parse_args()
    print(
        f"| run | answers | headline metric: first {FIRST} / all | member "
        "| first rested in answer | answers rested | answers with a segment by it |"
    )
    print("|---|---|---|---|---|---|---|")
    for spec in args.runs:
        label, _, folder = spec.partition("=")
        print("\n".join(rows(args.system, label, Path(folder))))


if __name__ == "__main__":
    main()
