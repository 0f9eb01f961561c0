"""The systems compared: each member alone, SpecEM variants, and three baselines that pick
one of the members' own answers (generate-then-rank, MBR, majority vote).

Every system uses the same members, sampling settings and per-example seed. The baselines
reuse the members' solo answers, so they cost no extra generation. A SpecEM variant may name
its settings in brackets: ``specem[policy=pool,gate=0.5,feedback=task]`` (any request
setting, and ``feedback=task``: weights carried from each example to the next, in run order).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..engine.types import Segment
from ..feedback import Feedback
from ..members import Member
from ..request import RequestSettings, open_request, score_with
from .tasks import Example, Task, rouge

PAPER = {"policy": "paper", "repeat_penalty": 1.0}
"""The paper's method as published: its rules, and drafts sampled with no penalty."""
SPECEM_VARIANTS: dict[str, dict[str, Any]] = {
    "specem": {},
    "specem-no-feedback": {"learning_rate": 0.0},
    "specem-paper": PAPER,
    "specem-logit": {**PAPER, "scoring": "mean_logit"},  # the reference code's rule
}
BASELINES = ("rank", "mbr", "vote")


DEFAULTS = RequestSettings()


@dataclass(frozen=True)
class Settings:
    """What every system shares: the sampling seed and the answer length."""

    seed: int = 0
    max_tokens: int = DEFAULTS.max_tokens
    window: int = DEFAULTS.window

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

    @property
    def recipe(self) -> dict[str, Any]:
        """What its answers depend on beyond the run's shared settings (members, seed,
        window, answer length): stored in ``run.json`` so that a resumed run never mixes
        answers made two ways, even after a default changed."""
        ...

    async def answer(self, example: Example, solos: Solos) -> Output: ...


def member_system_name(member: Member) -> str:
    return f"member:{member.label}"


def alone(member: Member) -> Member:
    """The member as it answers alone: one draft a round, as the model decodes by itself."""
    return member.model_copy(update={"sampling": member.sampling.model_copy(update={"drafts": 1})})


SHARED = frozenset({"seed", "max_tokens", "window", "stop"})
"""Loop settings every system of a run shares (``run.json`` has them), or sets per example."""
ALONE = frozenset({"run_on"})
"""The loop settings that change a member's answer alone (one draft a round): every round
accepts its draft, so only how it drafts matters."""


class Ensemble:
    """SpecEM over ``members`` (one member: that model alone), with request ``overrides``;
    ``feedback`` carries the weights from each example to the next (task-level feedback)."""

    needs_solos = False

    def __init__(
        self,
        name: str,
        members: Sequence[Member],
        settings: Settings,
        feedback: bool = False,
        **overrides: Any,
    ) -> None:
        self.name = name
        self.members = list(members)
        self.settings = settings
        self.request = RequestSettings(
            max_tokens=settings.max_tokens, window=settings.window, **overrides
        )
        self.feedback = Feedback() if feedback else None

    @property
    def alone(self) -> bool:
        """One member drafting once a round, with no loop redraft: every round accepts its
        draft."""
        tuned = self.request.tuned(self.members)
        if len(tuned) != 1:
            return False
        sampling = tuned[0].sampling
        return sampling.drafts == 1 and sampling.loop_penalty == 1

    @property
    def recipe(self) -> dict[str, Any]:
        sampling = {m.label: m.sampling.model_dump() for m in self.request.tuned(self.members)}
        loop = self.request.engine_config().model_dump(exclude=SHARED)
        if self.alone:
            return {"sampling": sampling, **{k: loop[k] for k in sorted(ALONE)}}
        return {"sampling": sampling, **loop, "feedback": self.feedback is not None}

    def resume(self, last: Mapping[str, Any] | None) -> None:
        """Take the task's weights back from this system's last stored answer."""
        if self.feedback is not None and last is not None:
            self.feedback = Feedback.from_json(last["details"]["feedback"])

    async def answer(self, example: Example, solos: Solos) -> Output:
        settings = self.request.model_copy(update={"seed": self.settings.seed_for(example)})
        messages = [{"role": "user", "content": example.prompt}]
        async with open_request(self.members, messages, settings, feedback=self.feedback) as run:
            async for _ in run:
                pass
        answer = run.answer
        details: dict[str, Any] = {
            "wins": answer.wins,
            "start_weights": answer.start_weights,
            "weights": answer.weights,
        }
        if not self.alone:
            details["rounds"] = answer.segments()
        if self.feedback is not None:
            details["feedback"] = self.feedback.to_json()
        return Output(answer.text, answer.finish_reason != "length", details)


class Baseline:
    """A system that picks one of the members' solo answers: it depends on nothing but
    them, and they are stored with their own recipes."""

    needs_solos = True

    @property
    def recipe(self) -> dict[str, Any]:
        return {}


class Rank(Baseline):
    """Generate-then-rank: the solo answer with the highest mean log-prob, averaged over
    every member's own scoring of it (PairRank-style, with no trained ranker)."""

    name = "rank"

    def __init__(self, members: Sequence[Member]) -> None:
        self.members = list(members)

    async def answer(self, example: Example, solos: Solos) -> Output:
        messages = [{"role": "user", "content": example.prompt}]
        # An unfinished answer is scored as text that goes on; an empty one can only stop.
        candidates = [Segment(o.text, finished=o.finished or not o.text) for o in solos.values()]
        rows = [[s.mean for s in await score_with(m, messages, candidates)] for m in self.members]
        means = [sum(column) / len(rows) for column in zip(*rows)]
        return _pick(solos, means)


class MBR(Baseline):
    """Minimum Bayes risk: the solo answer with the highest mean ROUGE-L to the others."""

    name = "mbr"

    async def answer(self, example: Example, solos: Solos) -> Output:
        texts = [o.text for o in solos.values()]
        means = [
            sum(rouge(other, text)["rougeL"] for j, other in enumerate(texts) if j != i)
            / max(len(texts) - 1, 1)
            for i, text in enumerate(texts)
        ]
        return _pick(solos, means)


class Vote(Baseline):
    """Majority vote over the members' final answers (gsm8k: the final number). A tie goes
    to the number of the earliest member; an answer without a number gets no vote."""

    name = "vote"

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


def split_names(text: str) -> list[str]:
    """Comma-separated system names; commas inside a variant's brackets stay in it."""
    return [n.strip() for n in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", text) if n.strip()]


def variant(name: str) -> dict[str, Any] | None:
    """The settings a SpecEM variant's name gives (``specem[policy=pool,gate=0.5]``), or
    None if ``name`` is not one; a bad setting is a ValueError that names it."""
    if name in SPECEM_VARIANTS:
        return dict(SPECEM_VARIANTS[name])
    match = re.fullmatch(r"specem\[(.*)\]", name)
    if match is None:
        return None
    options: dict[str, Any] = {}
    for item in filter(None, (i.strip() for i in match.group(1).split(","))):
        key, equals, value = item.partition("=")
        if not equals:
            raise ValueError(f"{name}: {item!r} is not a setting=value pair")
        options[key.strip()] = _value(value.strip())
    feedback = options.pop("feedback", "none")
    if feedback not in ("task", "none"):
        raise ValueError(f"{name}: feedback is 'task' or 'none', not {feedback!r}")
    unknown = set(options) - set(RequestSettings.model_fields)
    if unknown:
        raise ValueError(f"{name}: unknown settings {sorted(unknown)}")
    RequestSettings.model_validate(options)  # a bad value raises an error that names it
    return {**options, "feedback": feedback == "task"}


def _value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def system_names(members: Sequence[Member], task: Task) -> list[str]:
    """Every system that applies to ``task``, in the order the summary shows them."""
    names = [member_system_name(m) for m in members] + list(SPECEM_VARIANTS)
    return names + [b for b in BASELINES if b != "vote" or task.votable]


def recipes(chosen: Sequence[System], solo: Sequence[System]) -> dict[str, dict[str, Any]]:
    """What ``run.json`` records: the recipe of every system that will answer, the members
    alone among them only when a baseline needs their answers."""
    answering = [*solo, *chosen] if any(s.needs_solos for s in chosen) else list(chosen)
    return {s.name: s.recipe for s in answering}


def build_systems(
    names: Sequence[str], members: Sequence[Member], task: Task, settings: Settings
) -> list[System]:
    """The systems called ``names``; an unknown name is a ValueError listing the valid ones."""
    valid = system_names(members, task)
    unknown = [n for n in names if n not in valid and variant(n) is None]
    if unknown:
        raise ValueError(
            f"unknown systems {unknown} for task {task.name}; choose from {valid} or a "
            "variant such as specem[policy=pool,feedback=task]"
        )
    solo = {member_system_name(m): alone(m) for m in members}
    systems: list[System] = []
    for name in names:
        options = variant(name)
        if name in solo:
            systems.append(Ensemble(name, [solo[name]], settings))
        elif options is not None:
            systems.append(Ensemble(name, members, settings, **options))
        elif name == "rank":
            systems.append(Rank(members))
        elif name == "mbr":
            systems.append(MBR())
        else:
            systems.append(Vote(task))
    return systems
