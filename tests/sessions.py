"""What the parity tests of two backends share: accepted segments whose joins merge tokens,
and the check that two sessions of one model hold the same context after each of them."""

from __future__ import annotations

from typing import Any

from specem_chain.engine.types import Segment

SEGMENTS = [" The sea", " is deep", ".\n", "\n", "Waves", " roll", ":\n\n", "- in", "!"]
"""Accepted segments whose joins merge in SmolLM2's tokenizer ("\\n" + "\\n")."""


async def accept_alike(reference: Any, other: Any, segments: list[str] = SEGMENTS) -> None:
    """Accept ``segments`` in both sessions: after each, both hold the same context ids and
    grew by as many; and at least one join merged tokens (else the check sees nothing)."""
    assert other.ids == reference.ids
    merged = False
    for text in segments:
        before = list(reference.ids)
        grew = [await s.accept(Segment(text)) for s in (reference, other)]
        assert other.ids == reference.ids and grew[0] == grew[1]
        merged |= reference.ids[: len(before)] != before  # the join changed a context token
    assert merged, "no join merged tokens: the test would not see a difference"
