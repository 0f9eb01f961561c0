"""Loading a member's backend in tests, as a request does: built-in names resolved first."""

from __future__ import annotations

from typing import Any

from specem_chain.backends import loaded_backend
from specem_chain.members import Member
from specem_chain.models import resolve


def loaded(member: Member) -> Any:
    """The member's shared, loaded backend."""
    return loaded_backend(resolve(member, progress=False))
