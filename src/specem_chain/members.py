"""Member configuration: where a member's model comes from, its role and its sampling."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["both", "drafter", "verifier"]
DType = Literal["float32", "bfloat16", "float16"]


class Sampling(BaseModel):
    """How a member samples its drafts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float = Field(0.6, ge=0.0, description="0 means greedy decoding.")
    top_p: float = Field(0.9, gt=0.0, le=1.0)


class Member(BaseModel):
    """One member of the ensemble.

    ``source`` is a built-in name (see ``specem models list``), a local model folder, a GGUF
    file, or a Hugging Face hub model id (for users who have a hub).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(min_length=1)
    name: str | None = Field(None, description="Display name; derived from source if unset.")
    role: Role = "both"
    sampling: Sampling = Sampling()
    device: str = Field("cpu", description='A torch device, e.g. "cpu", "cuda:1".')
    dtype: DType = "float32"

    @classmethod
    def local(cls, source: str, **settings: object) -> Member:
        """A member that runs in this process with transformers."""
        return cls(source=source, **settings)

    @property
    def label(self) -> str:
        """The member's display name."""
        if self.name:
            return self.name
        tail = self.source.rstrip("/").rsplit("/", 1)[-1]
        return tail.removesuffix(".gguf")

    @property
    def drafts(self) -> bool:
        return self.role in ("both", "drafter")

    @property
    def verifies(self) -> bool:
        return self.role in ("both", "verifier")
