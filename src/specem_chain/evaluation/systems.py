"""The systems compared: each member alone, three SpecEM variants, and three baselines that
pick one of the members' own answers (generate-then-rank, MBR, majority vote).

Every system uses the same members, sampling settings and per-example seed. The baselines
reuse the members' solo answers, so they cost no extra generation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..backends import open_session
from ..engine.types import Score, Segment
from ..members import Member
from ..models import resolve
from ..request import RequestSettings, open_request
from .tasks import Example, Task, rouge

SPECEM_VARIANTS: dict[str, dict[str, Any]] = {
    "specem": {},
    "specem-no-feedback": {"learning_rate": 0.0},
    "specem-logit": {"scoring": "mean_logit"},
}
BASELINES = ("rank", "mbr", "vote")


@dataclass(frozen=True)
class Settings:
    """What every system shares: the sampling seed and the answer length."""

    seed: int = 0
    max_tokens: int = 256
    window: int = 10

    def seed_for(self, example: Example) -> int:
        return self.seed + example.index


@dataclass(frozen=True)
class Output:
    """A system's answer to one example."""

    text: str
    finished: bool = True  # ended its turn rather than hitting the length limit
    details: dict[str, Any] = field(default_factory=dict)


Solos = Mapping[str, Output]
"""Each member's own answer to the example, by member label, in member order."""


class System(Protocol):
    name: str
    needs_solos: bool

    async def answer(self, example: Example, solos: Solos) -> Output: ...


def member_system_name(member: Member) -> str:
    return f"member:{member.label}"


class Ensemble:
    """SpecEM over ``members`` (one member: that model alone), with engine ``overrides``."""

    needs_solos = False

    def __init__(
        self, name: str, members: Sequence[Member], settings: Settings, **overrides: Any
    ) -> None:
        self.name = name
        self.members = list(members)
        self.settings = settings
        self.request = RequestSettings(
            max_tokens=settings.max_tokens, window=settings.window, **overrides
        )

    async def answer(self, example: Example, solos: Solos) -> Output:
        settings = self.request.model_copy(update={"seed": self.settings.seed_for(example)})
        messages = [{"role": "user", "content": example.prompt}]
        async with open_request(self.members, messages, settings) as run:
            async for _ in run:
                pass
        answer = run.answer
        return Output(
            text=answer.text,
            finished=answer.finish_reason != "length",
            details={"wins": answer.wins, "weights": answer.weights},
        )


class Rank:
    """Generate-then-rank: the solo answer with the highest mean log-prob, averaged over
    every member's own scoring of it (PairRank-style, with no trained ranker)."""

    name = "rank"
    needs_solos = True

    def __init__(self, members: Sequence[Member]) -> None:
        self.members = list(members)

    async def answer(self, example: Example, solos: Solos) -> Output:
        messages = [{"role": "user", "content": example.prompt}]
        # An unfinished answer is scored as text that goes on; an empty one can only stop.
        candidates = [Segment(o.text, finished=o.finished or not o.text) for o in solos.values()]
        rows = [await _score(m, messages, candidates) for m in self.members]
        means = [sum(column) / len(rows) for column in zip(*rows)]
        return _pick(solos, means)


async def _score(
    member: Member, messages: list[dict[str, str]], candidates: list[Segment]
) -> list[float]:
    session = await open_session(resolve(member, progress=False), messages)
    try:
        scores: list[Score] = await session.score(candidates, "mean_logprob")
    finally:
        await session.aclose()
    return [s.mean for s in scores]


class MBR:
    """Minimum Bayes risk: the solo answer with the highest mean ROUGE-L to the others."""

    name = "mbr"
    needs_solos = True

    async def answer(self, example: Example, solos: Solos) -> Output:
        texts = [o.text for o in solos.values()]
        means = [
            sum(rouge(other, text)["rougeL"] for j, other in enumerate(texts) if j != i)
            / max(len(texts) - 1, 1)
            for i, text in enumerate(texts)
        ]
        return _pick(solos, means)


class Vote:
    """Majority vote over the members' final answers (gsm8k: the final number). A tie goes
    to the number of the earliest member; an answer without a number gets no vote."""

    name = "vote"
    needs_solos = True

    def __init__(self, task: Task) -> None:
        self.task = task

    async def answer(self, example: Example, solos: Solos) -> Output:
        finals = [self.task.final_answer(o.text) for o in solos.values()]
        votes = [finals.count(f) if f is not None else 0 for f in finals]
        return _pick(solos, [float(v) for v in votes], finals=finals)


def _pick(solos: Solos, scores: list[float], **details: Any) -> Output:
    """The first member's answer among those with the best score."""
    labels = list(solos)
    best = scores.index(max(scores))
    chosen = solos[labels[best]]
    return Output(
        text=chosen.text,
        finished=chosen.finished,
        details={"chosen": labels[best], "scores": scores, **details},
    )


def system_names(members: Sequence[Member], task: Task) -> list[str]:
    """Every system that applies to ``task``, in the order the summary shows them."""
    names = [member_system_name(m) for m in members] + list(SPECEM_VARIANTS)
    return names + [b for b in BASELINES if b != "vote" or task.votable]


def build_systems(
    names: Sequence[str], members: Sequence[Member], task: Task, settings: Settings
) -> list[System]:
    """The systems called ``names``; an unknown name is a ValueError listing the valid ones."""
    valid = system_names(members, task)
    unknown = [n for n in names if n not in valid]
    if unknown:
        raise ValueError(f"unknown systems {unknown} for task {task.name}; choose from {valid}")
    solo = {member_system_name(m): m for m in members}
    systems: list[System] = []
    for name in names:
        if name in solo:
            systems.append(Ensemble(name, [solo[name]], settings))
        elif name in SPECEM_VARIANTS:
            systems.append(Ensemble(name, members, settings, **SPECEM_VARIANTS[name]))
        elif name == "rank":
            systems.append(Rank(members))
        elif name == "mbr":
            systems.append(MBR())
        else:
            systems.append(Vote(task))
    return systems
