"""HTTP plumbing shared by the remote backends: one bounded connection pool per backend and
event loop, per-member timeouts, and retries with backoff for transient failures."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from ..engine.types import Score, Scoring, Segment
from ..errors import MemberServerError, MemberUnavailable
from ..members import Member

MAX_CONNECTIONS = 16
"""Connections one backend keeps open to its server, per event loop."""

BACKOFF_S = 0.2
"""First retry delay; it doubles with each retry."""


class Caller(Protocol):
    """What sends a backend's requests: its :class:`RemoteClient`, or the client as one
    answer's (:meth:`RemoteClient.answering`)."""

    async def get(self, path: str) -> Any: ...

    async def post(self, path: str, body: dict[str, Any]) -> Any: ...


class RemoteClient:
    """Requests to one member's server.

    httpx clients belong to the event loop they were first used in, and LangChain runs
    requests on the caller's loop or on the package's own, so the pool is kept per loop.
    A connection error, a timeout or a 5xx answer is retried ``member.retries`` times; after
    that the member is unavailable (:class:`MemberUnavailable`). Any other error answer is a
    :class:`MemberServerError` that quotes the server.
    """

    def __init__(self, member: Member, base_url: str) -> None:
        self.label = member.label
        self.base_url = base_url.rstrip("/")
        self.retries = member.retries
        self.timeout = httpx.Timeout(
            member.request_timeout, connect=min(member.request_timeout, 10.0)
        )
        self._headers = {"Accept": "application/json"}
        if (key := member.key()) is not None:
            self._headers["Authorization"] = f"Bearer {key}"
        self._clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
        self.session_header = member.session_header
        self.answered_at: float | None = None
        """When the server last answered a request well (``time.monotonic()``)."""

    def __repr__(self) -> str:  # never shows the headers, which may hold the bearer token
        return f"RemoteClient({self.label!r}, {self.base_url!r})"

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        for stale in [key for key in self._clients if key.is_closed()]:
            del self._clients[stale]
        if loop not in self._clients:
            self._clients[loop] = httpx.AsyncClient(
                base_url=self.base_url,
                headers=self._headers,
                timeout=self.timeout,
                limits=httpx.Limits(
                    max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS
                ),
            )
        return self._clients[loop]

    def answering(self, answer: str | None) -> Caller:
        """This client for one answer's requests: each carries the member's session header
        (:attr:`Member.session_header <specem_chain.members.Member.session_header>`) with
        the answer's id, so that a router with session affinity sends every request of the
        answer to one replica of the server; the client itself where the member sends no
        such header, or outside an answer (``answer`` None)."""
        if answer is None or self.session_header is None:
            return self
        return AnswerClient(self, {self.session_header: answer})

    async def get(self, path: str) -> Any:
        return await self.request("GET", path)

    def answered_within(self, seconds: float) -> bool:
        """Whether the server answered a request well in the last ``seconds``."""
        return self.answered_at is not None and time.monotonic() - self.answered_at < seconds

    async def probe(self, path: str, timeout: float) -> None:
        """``GET path`` once, on a connection of its own (a pool busy with answers would
        hold it back): TimeoutError without an answer within ``timeout``,
        :class:`MemberUnavailable` for any answer but a 2xx."""
        where = f"GET {self.base_url}{path}"
        try:
            async with httpx.AsyncClient(headers=self._headers, timeout=timeout) as client:
                response = await client.get(f"{self.base_url}{path}")
        except httpx.TimeoutException:
            raise TimeoutError(f"{where}: no answer in {timeout:g} s") from None
        except httpx.HTTPError as error:
            reason = f"cannot reach {where} ({type(error).__name__}: {error})"
            raise MemberUnavailable(self.label, reason) from None
        if not response.is_success:
            reason = f"{where} answered {response.status_code}: {_quote(response)}"
            raise MemberUnavailable(self.label, reason)

    async def text(self, path: str) -> str | None:
        """The text of ``GET path``, once, for an optional fact (None where it fails)."""
        try:
            response = await self._client().get(path, headers={"Accept": "text/plain"})
        except httpx.HTTPError:
            return None
        return response.text if response.status_code == 200 else None

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        return await self.request("POST", path, body)

    async def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """The JSON answer of ``method path`` (with ``headers`` besides the client's own),
        retried on transient failures."""
        where = f"{method} {self.base_url}{path}"
        reason = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(BACKOFF_S * 2 ** (attempt - 1))
            try:
                response = await self._client().request(method, path, json=body, headers=headers)
            except httpx.TimeoutException:
                reason = f"{where} timed out after {self.timeout.read} s"
                continue
            except httpx.TransportError as error:
                reason = f"cannot reach {where} ({type(error).__name__}: {error})"
                continue
            if response.status_code >= 500:
                reason = f"{where} answered {response.status_code}: {_quote(response)}"
                continue
            if response.status_code >= 400:
                raise MemberServerError(
                    f"member {self.label!r}: {where} answered {response.status_code}: "
                    f"{_quote(response)}"
                )
            try:
                answer = response.json()
            except ValueError:
                raise MemberServerError(
                    f"member {self.label!r}: {where} did not answer JSON; is the URL right?"
                ) from None
            self.answered_at = time.monotonic()
            return answer
        tries = f"{self.retries + 1} attempt" + ("s" if self.retries else "")
        raise MemberUnavailable(self.label, f"{reason} ({tries})")

    async def aclose(self) -> None:
        clients, self._clients = self._clients, {}
        for loop, client in clients.items():
            if loop is asyncio.get_running_loop():
                await client.aclose()


@dataclass(frozen=True)
class AnswerClient:
    """A member's client as one answer's: its connection pool, and ``headers`` (the
    session header) on every request."""

    client: RemoteClient
    headers: Mapping[str, str]

    async def get(self, path: str) -> Any:
        return await self.client.request("GET", path, headers=self.headers)

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        return await self.client.request("POST", path, body, self.headers)


async def served_model(
    client: RemoteClient, path: str, wanted: str, not_this_kind: str
) -> dict[str, Any]:
    """The OpenAI-style ``GET path`` (``/models``) entry of the served model ``wanted`` (""
    for the server's first); a server that answers otherwise is ``not_this_kind`` (the error
    that says so), one that serves no such model an error that lists what it serves."""
    try:
        listing = await client.get(path)
    except MemberServerError as error:
        raise MemberServerError(f"{not_this_kind} ({error})") from None
    if not isinstance(listing, dict) or not isinstance(listing.get("data"), list):
        raise MemberServerError(f"{not_this_kind} (GET {path} has no data list)")
    served = {
        str(m.get("id")): {**m, "id": str(m.get("id"))}
        for m in listing["data"]
        if isinstance(m, dict)
    }
    where = f"member {client.label!r}: {client.base_url}"
    if not served:
        raise MemberServerError(f"{where} serves no model")
    if wanted and wanted not in served:
        raise MemberServerError(f"{where} does not serve {wanted!r}; it serves {list(served)}")
    return served[wanted] if wanted else next(iter(served.values()))


def _quote(response: httpx.Response) -> str:
    """The server's error message, shortened."""
    try:
        body = response.json()
        text = body.get("error") or body.get("detail") or body if isinstance(body, dict) else body
    except ValueError:
        text = response.text
    return str(text)[:300]


async def score_each(
    member: Member,
    candidates: Sequence[Segment],
    scoring: Scoring,
    score: Callable[[Segment], Awaitable[Score]],
) -> list[Score]:
    """Score the candidates with one request each, all at once. Servers return log-probs,
    never logits, so ``mean_logit`` scoring is refused."""
    if scoring != "mean_logprob":
        raise MemberServerError(
            f"member {member.label!r} is remote; servers return log-probs, "
            "not logits: use scoring='mean_logprob'"
        )
    return list(await asyncio.gather(*(score(c) for c in candidates)))
