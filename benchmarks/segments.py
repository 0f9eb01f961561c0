"""Who wrote an ensemble's answers: from a ``specem eval`` run's recorded rounds.

    ./run python benchmarks/segments.py --root docs/benchmarks/quality/dev \
        gsm8k-anchor=gsm8k-anchor-a+gsm8k-anchor-b

Each RUN is ``LABEL=DIR[+DIR...]`` (folders joined with ``+`` are pooled, as in
``forest.py``). For every ensemble system of a run it prints the answers and their rounds,
the rounds in which more than one member drafted (under ``policy="anchor"``: the rounds the
anchor was unsure of its own draft), the share of the segments each member wrote, and the
answers that are word for word a member's own answer alone (the run's ``member:NAME``
system, same example, same seed). Counts only: no score is read.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from specem_chain.evaluation import replay
from specem_chain.evaluation.run import read_run


def anatomy(folders: list[Path]) -> dict[str, dict]:
    """Per ensemble system of the pooled folders: answers, rounds, rounds drafted by more
    than one member, segments won by each member, answers identical to each member's alone."""
    texts: dict[str, dict[str, str]] = {}
    runs: dict[str, list[Path]] = {}  # each ensemble system's folders
    for folder in folders:
        manifest, store = read_run(folder)
        for system in manifest["systems"]:
            if not system.startswith("member:"):
                runs.setdefault(system, []).append(folder)
        for (system, example), record in store.records.items():
            texts.setdefault(system, {})[example] = record["text"]
    found = {}
    for system, where in sorted(runs.items()):
        answers = [a for folder in where for a in replay.load(folder, system)]
        rounds = [r for a in answers for r in a.rounds]
        alone = {
            name.removeprefix("member:"): sum(
                texts[name].get(a.id) == texts[system][a.id] for a in answers
            )
            for name in texts
            if name.startswith("member:")
        }
        found[system] = {
            "answers": len(answers),
            "rounds": len(rounds),
            "several_drafted": sum(len(set(r.drafters)) > 1 for r in rounds),
            "segments": Counter(r.drafters[r.winner] for r in rounds),
            "identical_to_alone": alone,
        }
    return found


def table(label: str, found: dict[str, dict]) -> list[str]:
    lines = []
    for system, f in found.items():
        rounds = max(f["rounds"], 1)
        written = ", ".join(
            f"{member} {n} ({n / rounds:.1%})" for member, n in f["segments"].most_common()
        )
        identical = ", ".join(f"{m} {n}" for m, n in f["identical_to_alone"].items()) or "-"
        lines.append(
            f"| {label} | `{system}` | {f['answers']} | {f['rounds']} | "
            f"{f['several_drafted']} ({f['several_drafted'] / rounds:.1%}) | {written} | "
            f"{identical} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", metavar="LABEL=DIR[+DIR...]")
    parser.add_argument("--root", type=Path, default=Path(), help="Folders are relative to it.")
    args = parser.parse_args()
    lines = [
        "| run | system | answers | rounds | rounds more than one member drafted "
        "| segments written | answers identical to a member's alone |",
        "|---|---|---|---|---|---|---|",
    ]
    for spec in args.runs:
        label, _, folders = spec.partition("=")
        lines += table(label, anatomy([args.root / f for f in folders.split("+")]))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
