"""One forest plot of "system minus best member" across ``specem eval`` runs.

    ./run python benchmarks/forest.py --out docs/benchmarks/quality/forest \\
        gsm8k-2=eval/gsm8k-2 instructions-2=eval/instructions-2 ...
    ./run python benchmarks/forest.py --out docs/benchmarks/quality/forest \\
        --root docs/benchmarks/quality/dev @docs/benchmarks/quality/forest-runs.txt

Each RUN is ``LABEL=DIR[+DIR...]`` (``@FILE`` reads them from FILE, one a line; folders
are relative to ``--root``): the results folders of one task and one set of members
(several folders are pooled, e.g. the members' answers from one run and a variant's from
another, all with the same seeds; a folder of members alone may have been run with fewer
members, e.g. the best member alone at other sampling settings). In each run every system
is paired with the best member alone, example by example, on the task's headline metric,
exactly as ``specem eval``'s own summary does (paired bootstrap 95% interval; exact
McNemar test for exact match), beside the median seconds of an answer of each (over its
answers in the row's folders: rough where the folders ran at other times or beside other
work). Writes ``OUT.png`` and ``OUT.md``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from matplotlib.figure import Figure

from specem_chain.evaluation import summary
from specem_chain.evaluation.run import read_run
from specem_chain.evaluation.tasks import TASKS


def load(
    spec: str, root: Path
) -> tuple[str, str, summary.Comparison | None, dict[str, summary.Cost]]:
    """A run's label, headline metric, comparison with its best member and the answers'
    cost."""
    label, _, folders = spec.partition("=")
    paths = [root / folder for folder in folders.split("+")]
    runs = [read_run(folder) for folder in paths]
    manifest = runs[0][0]
    members = _members(label, [(m, folder) for (m, _), folder in zip(runs, paths)])
    recipes: dict[str, object] = {}
    for (other, _), folder in zip(runs, paths):
        if _shared(other) != _shared(manifest):
            raise SystemExit(f"{label}: {folder} was run with other settings than the first")
        for system, recipe in other.get("systems", {}).items():
            if recipes.setdefault(system, recipe) != recipe:
                raise SystemExit(f"{label}: {system} means other settings in {folder}")
    task = TASKS[manifest["task"]]
    scores: summary.Scores = {}
    records = {}
    for _, store in runs:
        records.update(store.records)
        for (system, example), record in store.records.items():
            scores.setdefault(system, {})[example] = record["metrics"]
    alone = [f"member:{m}" for m in members]
    result = summary.summarise(task, scores)
    comparison = summary.compare_with_best_member(task, scores, result, alone)
    return label, task.metrics[0], comparison, summary.costs(records, scores)


def _shared(manifest: dict) -> dict:
    """What the pooled folders must share: all but the members (see :func:`_members`), the
    systems and the order they ran in (seeds are per example, so the order does not change
    a member's answer)."""
    return {k: v for k, v in manifest.items() if k not in ("members", "systems", "order")}


def _members(label: str, folders: list[tuple[dict, Path]]) -> list[str]:
    """The row's members: those of its ensembles, which must be one list. A folder of
    members alone may have been run with fewer (each one of the row's members): a member's
    answer alone does not depend on who else was in the run."""
    ensembles = [
        m["members"] for m, _ in folders if any(not s.startswith("member:") for s in m["systems"])
    ]
    if any(e != ensembles[0] for e in ensembles):
        raise SystemExit(f"{label}: pools ensembles of other members ({ensembles})")
    members = ensembles[0] if ensembles else folders[0][0]["members"]
    for manifest, folder in folders:
        alone = all(
            s.startswith("member:") and s.removeprefix("member:") in members
            for s in manifest["systems"]
        )
        if manifest["members"] != members and not alone:
            raise SystemExit(
                f"{label}: {folder} was run with members {manifest['members']}, not "
                f"{members}; only a folder of members alone may have fewer"
            )
    return members


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], fromfile_prefix_chars="@")
    parser.add_argument("runs", nargs="+", metavar="LABEL=DIR[+DIR...]")
    parser.add_argument("--out", type=Path, required=True, help="Writes OUT.png and OUT.md.")
    parser.add_argument("--root", type=Path, default=Path(), help="Folders are relative to it.")
    args = parser.parse_args()

    rows = []  # (run label, metric, best member, system, paired, median seconds of both)
    for spec in args.runs:
        label, metric, comparison, cost = load(spec, args.root)
        if comparison is None:
            continue
        best, paired = comparison
        for system, p in paired.items():
            if not system.startswith("member:"):
                seconds = (
                    f"{cost[system]['median_seconds']:.0f} / {cost[best]['median_seconds']:.0f}"
                )
                rows.append((label, metric, best.removeprefix("member:"), system, p, seconds))

    lines = [
        "| run | system | metric | best member | n | better / worse | difference [95% CI] "
        "| McNemar p | median s: system / member |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, metric, best, system, p, seconds in rows:
        compared = " | ".join(summary.paired_cells(p))
        lines.append(
            f"| {label} | `{system}` | {metric} | {best} | {p['n']} | {compared} | {seconds} |"
        )
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")

    names = [f"{label}: {system} ({metric}, n={p['n']})" for label, metric, _, system, p, _ in rows]
    # the labels' width (8-point text, ~0.06 inch a character) plus 4 inches for the plot
    width = 4 + 0.06 * max((len(name) for name in names), default=0)
    figure = Figure(figsize=(width, 0.45 * len(rows) + 1.5), layout="constrained")
    ax = figure.subplots()
    for y, (_, _, _, _, p, _) in enumerate(rows):
        significant = p["ci_low"] > 0 or p["ci_high"] < 0
        colour = "tab:blue" if not significant else ("tab:green" if p["ci_low"] > 0 else "tab:red")
        ax.errorbar(
            p["difference"],
            y,
            xerr=[[p["difference"] - p["ci_low"]], [p["ci_high"] - p["difference"]]],
            fmt="o",
            color=colour,
            capsize=3,
        )
    ax.axvline(0, color="gray", linewidth=1)
    ax.set_yticks(range(len(rows)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("system minus best member alone (paired bootstrap 95% CI)")
    figure.savefig(args.out.with_suffix(".png"), dpi=120, bbox_inches="tight")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
