"""Scores per system with 95% bootstrap intervals, as markdown, JSON and a bar chart."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
from matplotlib.figure import Figure

from .run import ResultStore
from .tasks import Example, Task

RESAMPLES = 2000


class Score(TypedDict):
    score: float
    ci_low: float
    ci_high: float
    n: int


Summary = dict[str, dict[str, Score]]
"""metric -> system -> score; the task's first metric is the headline."""


def bootstrap(
    values: Sequence[float],
    *,
    weights: Sequence[float] | None = None,
    seed: int = 0,
    resamples: int = RESAMPLES,
    level: float = 0.95,
) -> Score:
    """The mean of ``values`` (weighted by ``weights`` if given: sum(w*v) / sum(w)) with a
    percentile bootstrap interval over the examples (seeded, reproducible)."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("no values to summarise")
    w = np.ones_like(data) if weights is None else np.asarray(weights, dtype=float)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, data.size, size=(resamples, data.size))
    means = (data[picks] * w[picks]).sum(axis=1) / w[picks].sum(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    # Rounding must not put a mean outside the data's range or outside its own interval.
    smallest, largest = float(data.min()), float(data.max())
    mean = min(max(float((data * w).sum() / w.sum()), smallest), largest)
    return Score(
        score=mean,
        ci_low=min(max(float(low), smallest), mean),
        ci_high=max(min(float(high), largest), mean),
        n=int(data.size),
    )


Scores = dict[str, dict[str, dict[str, float]]]
"""system -> example id -> metric -> value, for the answers finished so far."""


def score_answers(
    task: Task, store: ResultStore, systems: Sequence[str], examples: Sequence[Example]
) -> Scores:
    """Every finished answer of every system among ``examples``, scored.

    Answers are scored again here, so a fix to a scorer needs no new answers.
    """
    return {
        system: {
            e.id: task.score(e, record["text"])
            for e in examples
            if (record := store.get(system, e.id)) is not None
        }
        for system in systems
    }


class Cost(TypedDict):
    """What a system's answers took: the median wall-clock seconds of an answer, and how
    many answers ran to the token limit, over ``n`` answers."""

    median_seconds: float
    at_limit: int
    n: int


def costs(records: Mapping[tuple[str, str], Mapping[str, Any]], scores: Scores) -> dict[str, Cost]:
    """The cost of the answers that ``scores`` scored, from their stored ``records`` (by
    system and example id). A baseline's seconds are its choice alone: the members' answers
    it chooses from are theirs."""
    result: dict[str, Cost] = {}
    for system, by_example in scores.items():
        answers = [records[system, example] for example in by_example]
        if answers:
            result[system] = Cost(
                median_seconds=statistics.median(a["seconds"] for a in answers),
                at_limit=sum(not a["finished"] for a in answers),
                n=len(answers),
            )
    return result


def summarise(task: Task, scores: Scores, seed: int = 0) -> Summary:
    """Every metric of every system with at least one finished example (a metric in
    ``task.weights`` weighted by its score key)."""
    summary: Summary = {metric: {} for metric in task.metrics}
    for system, by_example in scores.items():
        if not by_example:
            continue
        for metric in task.metrics:
            values = [s[metric] for s in by_example.values()]
            key = task.weights.get(metric)
            weights = [s[key] for s in by_example.values()] if key else None
            summary[metric][system] = bootstrap(values, weights=weights, seed=seed)
    return summary


class Paired(TypedDict):
    """A system against another (the best member, or the anchor), example by example, on
    the headline metric: how many examples it scores above and below, the mean difference
    with a paired bootstrap 95% interval, and (for a 0/1 metric such as exact match) the
    exact McNemar p-value."""

    better: int
    worse: int
    n: int
    difference: float
    ci_low: float
    ci_high: float
    p_value: float | None


def paired_bootstrap(
    differences: Sequence[float], *, seed: int = 0, resamples: int = RESAMPLES
) -> tuple[float, float, float]:
    """The mean of paired differences with a percentile bootstrap 95% interval: the
    examples are resampled together, so what they share cancels out."""
    data = np.asarray(differences, dtype=float)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(resamples, data.size))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    return float(data.mean()), float(low), float(high)


def mcnemar_exact(better: int, worse: int) -> float:
    """Two-sided exact McNemar p-value: the binomial probability, under no difference, of
    discordant pairs split at least this unevenly. (Exact binomial sums, written out rather
    than adding scipy to the eval extra for one function.)"""
    n = better + worse
    if n == 0:
        return 1.0
    tail = math.fsum(math.comb(n, k) for k in range(min(better, worse) + 1)) / 2**n
    return min(1.0, 2 * tail)


Comparison = tuple[str, dict[str, Paired]]
"""The best member's system name, and every other system against it."""


def compare_with_best_member(
    task: Task, scores: Scores, summary: Summary, members: Sequence[str]
) -> Comparison | None:
    """On how many examples each system scores above and below the member alone (one of
    the ``members``' system names) with the best headline score; None if no member has
    finished an example. Intervals of two systems can overlap while one is better on most
    examples; this says which."""
    headline = summary[task.metrics[0]]
    finished = [m for m in members if m in headline]
    if not finished:
        return None
    best = max(finished, key=lambda m: headline[m]["score"])
    return best, compare_with(task, scores, summary, best)


def compare_with(task: Task, scores: Scores, summary: Summary, reference: str) -> dict[str, Paired]:
    """Every other system with a summary against the system ``reference``, example by
    example on the headline metric, over the examples both have answered."""
    metric = task.metrics[0]
    headline = summary[metric]
    theirs = scores[reference]
    paired: dict[str, Paired] = {}
    for system, ours in scores.items():
        if system == reference or system not in headline:
            continue
        shared = [i for i in ours if i in theirs]
        if not shared:
            continue
        diffs = [ours[i][metric] - theirs[i][metric] for i in shared]
        binary = all(v[metric] in (0.0, 1.0) for v in (*ours.values(), *theirs.values()))
        better, worse = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
        mean, low, high = paired_bootstrap(diffs)
        paired[system] = Paired(
            better=better,
            worse=worse,
            n=len(diffs),
            difference=mean,
            ci_low=low,
            ci_high=high,
            p_value=mcnemar_exact(better, worse) if binary else None,
        )
    return paired


def markdown(
    summary: Summary,
    comparison: Comparison | None = None,
    cost: Mapping[str, Cost] | None = None,
) -> str:
    """One row per system, one column per metric: ``mean [low, high]``, then n; with the
    answers' cost, their median seconds and how many ran to the token limit; with a
    comparison, the examples better / worse than the best member, the mean difference and
    McNemar's p."""
    metrics = list(summary)
    systems = list(summary[metrics[0]])
    header = ["system", *(f"{m} (95% CI)" for m in metrics), "n"]
    if cost is not None:
        header += ["median s", "at the token limit"]
    if comparison is not None:
        header += [f"vs {comparison[0]}: better / worse", "difference (95% CI)", "p"]
    lines = [table_row(header), "|---" * len(header) + "|"]
    for system in systems:
        cells = [system, *(score_cell(summary[m][system]) for m in metrics)]
        cells.append(str(summary[metrics[0]][system]["n"]))
        if cost is not None:
            spent = cost.get(system)
            cells += (
                [f"{spent['median_seconds']:.1f}", str(spent["at_limit"])] if spent else ["", ""]
            )
        if comparison is not None:
            paired = comparison[1].get(system)
            cells += paired_cells(paired) if paired else ["", "", ""]
        lines.append(table_row(cells))
    return "\n".join(lines) + "\n"


def table_row(cells: Sequence[str]) -> str:
    """A markdown table's row; an empty cell stays one space wide."""
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"


def score_cell(score: Score) -> str:
    """``mean [low, high]``."""
    return f"{score['score']:.3f} [{score['ci_low']:.3f}, {score['ci_high']:.3f}]"


def paired_cells(paired: Paired) -> list[str]:
    """A comparison's table cells: better / worse, the difference with its interval, p."""
    difference = f"{paired['difference']:+.3f} [{paired['ci_low']:+.3f}, {paired['ci_high']:+.3f}]"
    p = "" if paired["p_value"] is None else f"{paired['p_value']:.3f}"
    return [f"{paired['better']} / {paired['worse']}", difference, p]


def chart(summary: Summary, path: Path, title: str) -> None:
    """A horizontal bar per system and metric, with its 95% interval as an error bar."""
    metrics = list(summary)
    systems = list(summary[metrics[0]])
    figure = Figure(figsize=(6 * len(metrics) + 2, 0.5 * len(systems) + 2), layout="constrained")
    axes = figure.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics):
        scores = [summary[metric][s] for s in systems]
        means = [s["score"] for s in scores]
        errors = [
            [m - s["ci_low"] for m, s in zip(means, scores)],
            [s["ci_high"] - m for m, s in zip(means, scores)],
        ]
        colours = ["tab:blue" if s.startswith("specem") else "tab:gray" for s in systems]
        bars = ax.barh(systems, means, xerr=errors, color=colours, capsize=3)
        ax.bar_label(bars, fmt="%.2f", padding=4)
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.set_xlabel(f"{metric} (95% CI)")
    figure.suptitle(title, fontsize=10)
    figure.savefig(path, dpi=120)


def write(
    summary: Summary,
    out: Path,
    title: str,
    comparison: Comparison | None = None,
    cost: Mapping[str, Cost] | None = None,
) -> None:
    """``summary.json`` (headline metric), ``metrics.json`` (all), ``summary.md``,
    ``chart.png``; ``paired.json`` (the comparison with the best member) and ``cost.json``
    (the answers' cost) if given."""
    headline = next(iter(summary.values()))
    (out / "summary.json").write_text(json.dumps(headline, indent=2) + "\n", encoding="utf-8")
    (out / "metrics.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if comparison is not None:
        best, paired = comparison
        document = {"best_member": best, "systems": paired}
        (out / "paired.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    if cost is not None:
        (out / "cost.json").write_text(json.dumps(cost, indent=2) + "\n", encoding="utf-8")
    heading = title.replace("\n", "; ")
    table = markdown(summary, comparison, cost)
    (out / "summary.md").write_text(f"**{heading}**\n\n" + table, encoding="utf-8")
    chart(summary, out / "chart.png", title)
