"""Settings of the ensemble loop, validated with clear errors."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..backends.base import Scoring


class EngineConfig(BaseModel):
    """How the members write one answer together."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    window: int = Field(10, ge=1, le=512, description="Tokens each member drafts per round.")
    max_tokens: int = Field(256, ge=1, description="Answer length limit, in accepted tokens.")
    learning_rate: float = Field(
        1.0, ge=0.0, le=100.0, description="Hedge step size; 0 turns online feedback off."
    )
    scoring: Scoring = Field(
        "mean_logprob",
        description='"mean_logprob" (default) or "mean_logit" (local members only; the '
        "reference code's rule).",
    )
    fast_finish: bool = Field(
        False, description="Accept an end-of-turn draft without verifying it."
    )
    seed: int | None = Field(None, ge=0, description="Makes the sampling reproducible.")
    stop: tuple[str, ...] = Field((), description="The answer ends before any of these.")
    min_members: int = Field(
        1,
        ge=1,
        description="Live members a request needs; below it (after members that kept "
        "failing were dropped) the request fails.",
    )

    @field_validator("stop")
    @classmethod
    def _no_empty_stop(cls, stop: tuple[str, ...]) -> tuple[str, ...]:
        if any(s == "" for s in stop):
            raise ValueError("stop sequences must not be empty strings")
        return stop
