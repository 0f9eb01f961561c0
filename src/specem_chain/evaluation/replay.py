"""Replaying policies on recorded rounds: ``specem replay``.

A ``specem eval`` run records, for every ensemble answer, every round as the policy saw it
(``rounds.jsonl``: the candidates, who drafted each, and each verifier's mean log-prob and
token count of each). A policy can then be run on those rounds offline, at no model cost:
it sees each recorded round and picks a winner with its own weights. Its choices are
counted against the recorded ones. They are not a score: a different choice would have
changed every later round, which the record does not hold. Under the policy that made the
run, a replay reproduces its choices and weights exactly.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engine.config import RoundPolicy
from ..engine.policy import Verification
from .run import ROUNDS


@dataclass(frozen=True)
class RecordedRound:
    """One recorded round, as a policy sees it, and what happened."""

    verification: Verification | None
    """None when the round needed no verification."""
    drafters: tuple[str, ...]
    """Who drafted each candidate."""
    winner: int
    """The recorded winner (a candidate's index)."""
    weights: tuple[float, ...]
    """The recorded weights after the round, in member order."""


@dataclass(frozen=True)
class RecordedAnswer:
    system: str
    id: str
    members: tuple[str, ...]
    start: tuple[float, ...]
    rounds: tuple[RecordedRound, ...]


def load(folder: Path, system: str) -> list[RecordedAnswer]:
    """The recorded answers of ``system`` in a run folder (the last record of each
    example, as a resumed run may have written one twice)."""
    path = folder / ROUNDS
    if not path.is_file():
        raise ValueError(f"{path} does not exist: run specem eval with an ensemble first")
    answers: dict[str, RecordedAnswer] = {}
    for record in _lines(path):
        if record.get("system") == system:
            answers[record["id"]] = answer_of(record)
    if not answers:
        found = sorted({r.get("system") for r in _lines(path)})
        raise ValueError(f"{path} has no rounds of {system!r}; it has {found}")
    return list(answers.values())


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as file:
        for line in file:
            if line.endswith("\n"):  # a line cut short by a killed run is left out
                yield json.loads(line)


def answer_of(record: Mapping[str, Any]) -> RecordedAnswer:
    """A recorded answer from a line of ``rounds.jsonl``."""
    rounds = record["rounds"]
    members = tuple(rounds[0]["weights"]) if rounds else ()
    seat = {name: i for i, name in enumerate(members)}
    start = record.get("start_weights") or {m: 1.0 / len(members) for m in members}
    parsed = []
    for r in rounds:
        drafters = tuple(c["member"] for c in r["candidates"])
        # the winning member's candidate with the accepted text (a member may draft several)
        winner = next(
            k
            for k, c in enumerate(r["candidates"])
            if (c["member"], c["text"]) == (r["member"], r["text"])
        )
        v = r.get("verification")
        verification = None
        if v is not None:
            verification = Verification(
                members=len(members),
                drafters=tuple(seat[d] for d in drafters),
                verifiers=tuple(seat[name] for name in r["verifiers"]),
                means=tuple(map(tuple, v["means"])),
                tokens=tuple(map(tuple, v["tokens"])),
                units=tuple(v["units"]),
                scoring=v["scoring"],
                least=tuple(map(tuple, v.get("least", ()))),
            )
        weights = tuple(r["weights"][m] for m in members)
        parsed.append(RecordedRound(verification, drafters, winner, weights))
    return RecordedAnswer(
        record["system"], record["id"], members, tuple(start[m] for m in members), tuple(parsed)
    )


@dataclass
class Replayed:
    """What one policy did on the recorded rounds."""

    rounds: int = 0
    agreed: int = 0
    weights_agreed: int = 0
    picks: Counter[str] = field(default_factory=Counter)
    final_weights: list[dict[str, float]] = field(default_factory=list)

    @property
    def agreement(self) -> float:
        return self.agreed / self.rounds if self.rounds else 1.0


def replay(answers: Sequence[RecordedAnswer], policy: RoundPolicy) -> Replayed:
    """Run ``policy`` on every recorded round that was verified, each answer from its
    recorded starting weights, the weights carried from round to round as the policy
    moves them."""
    result = Replayed()
    for answer in answers:
        weights = list(answer.start)
        for index, recorded in enumerate(answer.rounds, start=1):
            if recorded.verification is None:
                continue
            judgement = policy.judge(recorded.verification, weights, index)
            weights = judgement.weights
            result.rounds += 1
            result.agreed += judgement.winner == recorded.winner
            result.weights_agreed += tuple(weights) == recorded.weights
            result.picks[recorded.drafters[judgement.winner]] += 1
        result.final_weights.append(dict(zip(answer.members, weights)))
    return result


def table(rows: Mapping[str, Replayed], members: Sequence[str]) -> str:
    """A markdown row per policy: rounds, agreement with the recorded choices, each
    member's share of the picks and its mean weight at the end of an answer."""
    header = "| policy | rounds | same choice as recorded | " + " | ".join(
        f"{m}: picks / final weight" for m in members
    )
    lines = [header + " |", "|---|---|---|" + "---|" * len(members)]
    for name, r in rows.items():
        cells = []
        for m in members:
            share = r.picks[m] / r.rounds if r.rounds else 0.0
            weight = sum(w.get(m, 0.0) for w in r.final_weights) / max(len(r.final_weights), 1)
            cells.append(f"{share:.0%} / {weight:.2f}")
        lines.append(f"| {name} | {r.rounds} | {r.agreement:.0%} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
