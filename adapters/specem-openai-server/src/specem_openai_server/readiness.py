"""Readiness: whether each member can serve now, as ``/ready`` reports it.

A member in this process is ready once it is loaded (a server loads its members as it
starts; ``create_app`` without ``load`` loads each at its first request, and counts it ready
until then). A member on a server is asked now: its backend's first check (what the
server is and how it scores), then one cheap request on a connection of its own, so that
answers filling the member's pool under load cannot hold the probe back, and a server
that went away is seen at the next probe. A probe that times out while the server
answered an answer's request in the last :data:`RECENT_S` seconds counts as ready: the
server is busy, not gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from specem_chain import Member, models
from specem_chain.backends.registry import loaded_backend
from specem_chain.errors import SpecEMError

PROBE_S = 5.0
"""How long one member's probe may take before it counts as not ready."""

RECENT_S = 10.0
"""A member whose probe times out is still ready if its server answered this recently."""

PROBES = {"tgi": "/info", "vllm": "/v1/models", "openai": "/models"}
"""A cheap request each kind of server answers while it serves."""


def local_runs_on(member: Member) -> str:
    """Where a member in this process runs: ``llamacpp`` or ``transformers``."""
    try:
        return models.runs_on(member)
    except SpecEMError:
        return member.backend


def remote_runs_on(member: Member, backend: Any) -> str:
    """A server's kind, with how it scores where it has a choice (``vllm (logprob_token_ids)``),
    as an answer's provenance names it."""
    if member.kind == "vllm":
        return f"vllm ({backend.route})"
    return member.kind


async def probe(member: Member, timeout: float = PROBE_S) -> dict[str, Any]:
    """One member's readiness: its label, ``ready``, ``runs_on`` and, when it is not
    ready, the ``error`` that says why."""
    if not member.remote:
        return {"member": member.label, "ready": True, "runs_on": local_runs_on(member)}
    backend = loaded_backend(member)

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        await asyncio.wait_for(backend.ready(), timeout)
        await backend.client.probe(PROBES[member.kind], max(deadline - loop.time(), 0.01))
    except (asyncio.TimeoutError, TimeoutError) as error:  # one class from Python 3.11
        if not backend.client.answered_within(RECENT_S):
            return not_ready(member, str(error) or f"no answer in {timeout:g} s")
    except Exception as error:  # every failure is the member's not being ready
        return not_ready(member, str(error) or type(error).__name__)
    return {"member": member.label, "ready": True, "runs_on": remote_runs_on(member, backend)}


def not_ready(member: Member, why: str) -> dict[str, Any]:
    return {"member": member.label, "ready": False, "runs_on": member.kind, "error": why}


async def readiness(
    members: Sequence[Member], min_members: int, draining: bool
) -> tuple[int, dict[str, Any]]:
    """``/ready``'s status and body: 200 while at least ``min_members`` members are ready
    and the server does not drain, else 503; and every member's probe."""
    found = await asyncio.gather(*(probe(m) for m in members))
    ready = sum(m["ready"] for m in found)
    status = "draining" if draining else "ready" if ready >= min_members else "unready"
    body = {"status": status, "ready_members": ready, "min_members": min_members}
    return (200 if status == "ready" else 503), body | {"members": found}
