"""``specem eval --choose``: which of the candidate members to ensemble, judged from each
member alone on the user's own examples.

The rule is UniTE's finding (Yao et al., ICLR 2025, arXiv 2410.03777): members more than
about 10% apart ensemble worse than the better one alone. Read relative to the best score:

- the **anchor** is the member with the highest headline score; a tie goes to the one with
  the lower median seconds an answer, then to the one named first;
- another member **helps** when its score is at least :data:`CLOSE_ENOUGH` (90%) of the
  anchor's, and is **left out** otherwise. An anchor that scores 0 leaves every other
  member out: such examples tell nothing about who would help;
- of the members left out that answer alone in at most :data:`DRAFTER_SECONDS` of the
  anchor's time, the best scoring is the anchor's **drafter** (the likeliest to write
  what the anchor would), where no helper is that cheap: under the anchored policy the
  others draft only where the anchor is unsure of its own draft, and win only where the
  anchor finds theirs about as likely, so a cheap drafter keeps those rounds cheap and a
  weaker one cannot write what the anchor finds clearly less likely;
- the ensemble to run is the anchor, its drafter and its helpers under the anchored
  policy, ``specem[policy=anchor,anchor=NAME]``; with neither, the anchor alone.

:func:`decide` is the rule, on plain numbers. :func:`from_run` applies it to a finished
run and gathers the evidence (scores with their intervals, paired differences with the
anchor, seconds an answer: :mod:`~specem_chain.evaluation.summary`) into the document that
``choice.json`` holds (:func:`choice`); :func:`markdown` writes it as ``choice.md``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .summary import (
    Cost,
    Paired,
    Scores,
    Summary,
    compare_with,
    paired_cells,
    score_cell,
    table_row,
)
from .tasks import Task

CLOSE_ENOUGH = 0.9
"""A member helps when its score is at least this share of the anchor's (UniTE: members
more than about 10% apart ensemble worse than the better one alone)."""
SOURCE = "UniTE (Yao et al., ICLR 2025, arXiv 2410.03777)"
DRAFTER_SECONDS = 2 / 3
"""The most a drafter's median seconds an answer may be, as a share of the anchor's: each
round where the anchor is unsure costs the drafter's drafting besides the anchor's, so a
drafter nearly as slow would make those rounds cost twice."""
EDGE = 1e-9
"""Slack for a share computed in floating point: 9/32 against 10/32 is exactly 90%."""


@dataclass(frozen=True)
class MemberAlone:
    """A member alone on the examples: its headline score and median seconds an answer."""

    name: str
    score: float
    seconds: float


@dataclass(frozen=True)
class Decision:
    """The anchor, the members that help it (cheapest first) and those left out (in the
    order given); ``shares`` is each member's score over the anchor's (None when the
    anchor scores 0)."""

    anchor: str
    helpers: tuple[str, ...]
    left_out: tuple[str, ...]
    shares: dict[str, float | None]
    drafter: str | None = None
    """A member left out that drafts for the anchor (see the module)."""

    @property
    def members(self) -> tuple[str, ...]:
        """The ensemble to run: the anchor, then its drafter, then its helpers (the
        cheapest first)."""
        return (self.anchor, *([self.drafter] if self.drafter else []), *self.helpers)

    @property
    def system(self) -> str:
        """The recommended system's name in ``specem eval``."""
        if len(self.members) == 1:
            return _alone(self.anchor)
        return f"specem[policy=anchor,anchor={self.anchor}]"


def share(score: float, anchor: float) -> float | None:
    """``score`` as a share of the anchor's score; None when the anchor scores 0 or less."""
    return score / anchor if anchor > 0 else None


def decide(members: Sequence[MemberAlone], close_enough: float = CLOSE_ENOUGH) -> Decision:
    """The anchor and who helps it, by the rule in the module's docstring."""
    if len(members) < 2:
        raise ValueError("choosing members needs at least two")
    order = {c.name: i for i, c in enumerate(members)}
    anchor = min(members, key=lambda c: (-c.score, c.seconds, order[c.name]))
    shares = {c.name: share(c.score, anchor.score) for c in members}
    others = [c for c in members if c is not anchor]
    helping = [c for c in others if (s := shares[c.name]) is not None and s >= close_enough - EDGE]
    helpers = sorted(helping, key=lambda c: (c.seconds, order[c.name]))
    left_out = [c for c in others if c not in helping]
    cheap = anchor.seconds * DRAFTER_SECONDS + EDGE
    drafters = sorted(
        (c for c in left_out if c.seconds <= cheap),
        key=lambda c: (-c.score, c.seconds, order[c.name]),
    )
    drafter = drafters[0].name if drafters and all(c.seconds > cheap for c in helpers) else None
    return Decision(
        anchor=anchor.name,
        helpers=tuple(c.name for c in helpers),
        left_out=tuple(c.name for c in left_out if c.name != drafter),
        shares=shares,
        drafter=drafter,
    )


def command(options: Sequence[str], specs: Mapping[str, str], decision: Decision) -> str | None:
    """The ``specem eval`` command that runs the recommended ensemble beside the anchor
    alone, on the examples and settings that ``options`` give (``--task``, ``--data``, ...,
    ``--out``); ``specs`` gives each member's ``--members`` spelling by name. None when the
    recommendation is the anchor alone, whose answers the run already has."""
    if len(decision.members) == 1:
        return None
    members = ",".join(specs[name] for name in decision.members)
    systems = f"{_alone(decision.anchor)},{decision.system}"
    words = ["specem", "eval", *options, "--members", members, "--systems", systems]
    return shlex.join(words)


def from_run(
    task: Task,
    scores: Scores,
    summary: Summary,
    cost: Mapping[str, Cost],
    specs: Mapping[str, str],
    options: Sequence[str],
) -> dict[str, Any]:
    """The choice among the members alone of a finished run: ``specs`` gives each member's
    ``--members`` spelling by name, in member order; ``options`` the run's examples and
    settings for the command that runs the recommendation (:func:`command`)."""
    metric = task.metrics[0]

    def alone(name: str) -> MemberAlone:
        system = _alone(name)
        return MemberAlone(name, summary[metric][system]["score"], cost[system]["median_seconds"])

    decision = decide([alone(name) for name in specs])
    paired = compare_with(task, scores, summary, _alone(decision.anchor))
    document = choice(decision, metric, summary, paired, cost, command(options, specs, decision))
    return {
        "task": task.name,
        "examples": summary[metric][_alone(decision.anchor)]["n"],
        **document,
    }


def _alone(name: str) -> str:
    """The system name of a member alone."""
    return f"member:{name}"


def choice(
    decision: Decision,
    metric: str,
    summary: Summary,
    paired: Mapping[str, Paired],
    cost: Mapping[str, Cost],
    rerun: str | None,
) -> dict[str, Any]:
    """What ``choice.json`` holds: the rule, the anchor, every member's verdict with its
    evidence (score and 95% interval, the paired difference with the anchor, seconds an
    answer and their ratio to the anchor's) and the recommendation. ``summary``, ``paired``
    and ``cost`` are keyed by system name (``member:NAME``); ``paired`` compares with the
    anchor alone."""
    anchor_seconds = cost[_alone(decision.anchor)]["median_seconds"]
    members = {}
    for name, member_share in decision.shares.items():
        system = _alone(name)
        seconds = cost[system]["median_seconds"]
        members[name] = {
            "verdict": verdict(decision, name),
            "score": summary[metric][system],
            "share_of_anchor": member_share,
            "paired_with_anchor": paired.get(system),
            "median_seconds": seconds,
            "seconds_ratio": seconds / anchor_seconds if anchor_seconds > 0 else None,
        }
    return {
        "metric": metric,
        "rule": {"close_enough": CLOSE_ENOUGH, "of": "the anchor's score", "source": SOURCE},
        "anchor": decision.anchor,
        "members": members,
        "recommendation": {
            "system": decision.system,
            "members": list(decision.members),
            "command": rerun,
            "reason": reason(decision),
        },
    }


def verdict(decision: Decision, name: str) -> str:
    """``anchor``, ``helps`` or ``leave out``."""
    if name == decision.anchor:
        return "anchor"
    if name == decision.drafter:
        return "drafts"
    return "helps" if name in decision.helpers else "leave out"


def reason(decision: Decision) -> str:
    """The recommendation in one sentence."""
    anchor, percent = decision.anchor, f"{CLOSE_ENOUGH:.0%}"
    drafts = (
        f"{decision.drafter} answers in at most {DRAFTER_SECONDS:.0%} of {anchor}'s time: "
        f"it drafts where {anchor} is unsure, and wins only where {anchor} finds its draft "
        "about as likely as its own"
        if decision.drafter
        else ""
    )
    if decision.helpers:
        helping = (
            f"{_names(decision.helpers)} scored at least {percent} of {anchor}'s score: "
            f"ensemble them under the anchored policy, {anchor} verifying"
        )
        return f"{helping}; {drafts}" if drafts else helping
    if drafts:
        return f"no other member scored {percent} of {anchor}'s score, but {drafts}"
    if decision.shares[anchor] is None:
        return (
            f"{anchor} scored 0, and so did every member: these examples cannot tell who "
            f"would help; run {anchor} alone, or choose on examples the members can score on"
        )
    return f"no other member scored {percent} of {anchor}'s score: run {anchor} alone"


def _names(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def markdown(document: Mapping[str, Any]) -> str:
    """``choice.md``: a row per member with its verdict and evidence, then the
    recommendation, the command that runs it and the rule."""
    metric, anchor = document["metric"], document["anchor"]
    header = [
        "member",
        "verdict",
        f"{metric} (95% CI)",
        "share of the anchor's",
        f"vs {anchor}: better / worse",
        "difference (95% CI)",
        "p",
        "median s",
        "s vs the anchor's",
    ]
    lines = [table_row(header), "|---" * len(header) + "|"]
    for name, member in document["members"].items():
        paired = member["paired_with_anchor"]
        cells = [
            name,
            member["verdict"],
            score_cell(member["score"]),
            _format(member["share_of_anchor"], "{:.1%}"),
            *(paired_cells(paired) if paired else ["", "", ""]),
            f"{member['median_seconds']:.1f}",
            _format(member["seconds_ratio"], "{:.2f}x"),
        ]
        lines.append(table_row(cells))
    recommended = document["recommendation"]
    system, members = recommended["system"], ", ".join(f"`{m}`" for m in recommended["members"])
    lines += ["", f"Recommended: `{system}` with {members}: {recommended['reason']}."]
    if recommended["command"]:
        lines += ["", "```bash", recommended["command"], "```"]
    rule = document["rule"]
    lines += [
        "",
        f"Rule: a member helps if its score is at least {rule['close_enough']:.0%} of the "
        f"anchor's ({rule['source']}: members more than about 10% apart ensemble worse "
        "than the better one alone).",
    ]
    return "\n".join(lines) + "\n"


def _format(value: float | None, form: str) -> str:
    return "" if value is None else form.format(value)


def write(document: Mapping[str, Any], out: Path, title: str) -> str:
    """``choice.json`` and ``choice.md`` in ``out``; returns the markdown."""
    (out / "choice.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    text = markdown(document)
    heading = title.replace("\n", "; ")
    (out / "choice.md").write_text(f"**{heading}**\n\n" + text, encoding="utf-8")
    return text
