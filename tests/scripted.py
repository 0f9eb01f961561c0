"""A scripted member: a MemberSession whose drafts and scores are given, for fast,
deterministic tests of the engine's rules (no model runs)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specem_chain.engine import EngineConfig, RoundEvent, Seat, run_rounds
from specem_chain.engine.constraints import AnswerFormat
from specem_chain.engine.types import Draft, Fits, Sampling, Score, Segment
from specem_chain.errors import MemberUnavailable

Scorer = Callable[[Segment], float]


def likes(word: str, hit: float = -0.5, miss: float = -3.0) -> Scorer:
    """Mean log-prob ``hit`` for a candidate containing ``word``, else ``miss``."""
    return lambda c: hit if word in c.text else miss


class ScriptedSession:
    """Drafts ``drafts`` in turn (the last one again once they run out); scores each
    candidate with ``scorer`` (one token per UTF-8 byte, at least one); records what it is
    asked; fails as unavailable from call number ``fail_after`` on."""

    runs_on = "scripted"

    def __init__(
        self,
        name: str,
        drafts: Sequence[Draft | str] = (" word",),
        scorer: Scorer = lambda _: -1.0,
        *,
        fail_after: int | None = None,
        prompt_tokens: int = 3,
    ) -> None:
        self.name = name
        self.drafts = [d if isinstance(d, Draft) else Draft(d, 1, finished=False) for d in drafts]
        self.scorer = scorer
        self.fail_after = fail_after
        self.prompt_tokens = prompt_tokens
        self.calls = 0
        self.drafted = 0
        self.seeds: list[int] = []
        self.samplings: list[Sampling] = []
        self.scored: list[list[Segment]] = []
        self.accepted: list[str] = []
        self.closed = False

    def _tick(self) -> None:
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise MemberUnavailable(self.name, "connection refused")

    async def draft(
        self,
        window: int,
        sampling: Sampling,
        seed: int,
        run_on: bool = False,
        fits: Fits | None = None,
    ) -> Draft:
        self._tick()
        self.seeds.append(seed)
        self.samplings.append(sampling)
        draft = self.drafts[min(self.drafted, len(self.drafts) - 1)]
        self.drafted += 1
        return draft

    async def score(self, candidates: Sequence[Segment], scoring: str) -> list[Score]:
        self._tick()
        self.scored.append(list(candidates))
        return [Score.of([self.scorer(c)] * max(c.units, 1)) for c in candidates]

    async def accept(self, segment: Segment) -> int:
        self._tick()
        self.accepted.append(segment.text)
        return max(len(segment.text.split()), 1)

    async def aclose(self) -> None:
        self.closed = True


def seat(session: ScriptedSession, role: str = "both") -> Seat:
    return Seat(session.name, session, drafts=role != "verifier", verifies=role != "drafter")


async def events(
    *seats: Seat | ScriptedSession,
    answer_format: AnswerFormat | None = None,
    weights: Sequence[float] | None = None,
    **settings: object,
) -> list[RoundEvent]:
    """Every round of one answer by the seated members."""
    seated = [s if isinstance(s, Seat) else seat(s) for s in seats]
    config = EngineConfig(**{"seed": 0, **settings})
    return [e async for e in run_rounds(seated, config, answer_format, weights)]
