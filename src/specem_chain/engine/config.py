"""Settings of the ensemble loop, validated with clear errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .policy import Anchor, Judgement, Paper, Peer, Pool, Verification
from .types import Scoring

PolicyName = Literal["paper", "pool", "peer", "anchor"]


class RoundPolicy(Protocol):
    """Chooses a round's winner from what the verifiers said, and updates the weights."""

    def judge(self, v: Verification, weights: Sequence[float], round_index: int) -> Judgement: ...


class EngineSettings(BaseModel):
    """How the members write one answer together: the loop's settings, declared once here
    and shared by :class:`EngineConfig`, the chat model and the other front ends."""

    window: int = Field(10, ge=1, le=512, description="Tokens each member drafts per round.")
    max_tokens: int = Field(256, ge=1, description="Answer length limit, in accepted tokens.")
    policy: PolicyName = Field(
        "pool",
        description='How a round\'s winner is chosen and the weights move: "pool" (per-byte '
        'log-probs pooled by weight), "paper" (the paper\'s rules), "peer" (no member '
        'judges its own draft) or "anchor" (one member, the anchor, writes; the others are '
        "asked only where it is unsure of its draft); see Concepts -> Policies.",
    )
    anchor: str | None = Field(
        None,
        min_length=1,
        description='With policy="anchor": the anchor\'s member name. Unset: the member '
        "with the highest starting weight (a task's, with Feedback), else the first.",
    )
    learning_rate: float = Field(
        1.0, ge=0.0, le=100.0, description="Hedge step size; 0 turns online feedback off."
    )
    scoring: Scoring = Field(
        "mean_logprob",
        description='"mean_logprob" (default) or "mean_logit" (local members only; the '
        "reference code's rule).",
    )
    run_on: bool = Field(
        False,
        description="Drafts run on past the window to the end of their last word instead "
        "of being cut back to its start (members in this process; servers draft a fixed "
        "number of tokens and are cut back).",
    )
    fast_finish: bool = Field(
        False, description="Accept an end-of-turn draft without verifying it."
    )
    gate: float = Field(
        0.8,
        ge=0.0,
        lt=1.0,
        description="A member whose starting weight is below gate/K (K members) does not "
        "draft in the request; it still verifies. A request starts from uniform weights, "
        "so the gate acts only on a task's weights (Feedback), and a rested member is "
        "judged again once the decay brings its weight back over the gate. 0: never.",
    )
    exit: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="A member whose weight falls below exit/K (K members) after a round "
        "stops drafting for the rest of the request; it still verifies (SpecFuse's model "
        "exit). 0: never.",
    )
    seed: int | None = Field(None, ge=0, description="Makes the sampling reproducible.")
    min_members: int = Field(
        1,
        ge=1,
        description="Live members a request needs; below it (after members that kept "
        "failing were dropped) the request fails.",
    )

    @model_validator(mode="after")
    def _anchor_needs_its_policy(self) -> EngineSettings:
        if self.anchor is not None and self.policy != "anchor":
            raise ValueError(
                f"anchor={self.anchor!r} names the anchored policy's anchor; it needs "
                f"policy='anchor', not {self.policy!r}"
            )
        return self

    @model_validator(mode="after")
    def _per_byte_policies_need_log_probs(self) -> EngineSettings:
        if self.policy != "paper" and self.scoring != "mean_logprob":
            raise ValueError(
                f"policy={self.policy!r} compares log-probs per byte; it needs "
                f"scoring='mean_logprob', not {self.scoring!r} (which only policy='paper' takes)"
            )
        return self


class EngineConfig(EngineSettings):
    """The settings of one request's loop, validated with clear errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stop: tuple[str, ...] = Field((), description="The answer ends before any of these.")

    @field_validator("stop")
    @classmethod
    def _no_empty_stop(cls, stop: tuple[str, ...]) -> tuple[str, ...]:
        if any(s == "" for s in stop):
            raise ValueError("stop sequences must not be empty strings")
        return stop

    def round_policy(self, anchor: int = 0) -> RoundPolicy:
        """The policy named by :attr:`policy`, with these settings (``anchor``: the anchor's
        seat, for the anchored policy)."""
        if self.policy == "anchor":
            return Anchor(self.learning_rate, anchor=anchor)
        return POLICIES[self.policy](self.learning_rate)


POLICIES: dict[str, type[Paper] | type[Pool]] = {
    "paper": Paper,
    "pool": Pool,
    "peer": Peer,
    "anchor": Anchor,
}
