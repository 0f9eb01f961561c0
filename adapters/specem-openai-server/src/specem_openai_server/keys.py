"""API keys: with any key set, every request under ``/v1/`` (and ``/metrics`` where the operator
asks) needs ``Authorization: Bearer KEY``, as on vLLM's and llama.cpp's servers (``--api-key``).
A request without a valid key is a 401 in OpenAI's shape (``invalid_api_key``) before anything
else is done for it: no body read, no member asked.

Keys come from ``--api-key`` (repeatable, or ``SPECEM_SERVE_API_KEY``) and
``--api-key-file`` (one key a line; blank lines and lines starting with ``#`` are skipped),
which the server reads again on SIGHUP, so that a key can be added or revoked without a
restart (a file that cannot be read then, or holds no key, leaves the keys as they were, and
says so in the log). Only
SHA-256 digests of the keys are kept, and a key sent is compared with each in constant time
(:func:`hmac.compare_digest`), whatever its length. No key, sent or known, is ever logged,
counted or written in an error.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import signal
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from . import metrics
from .errors import APIError

log = logging.getLogger("specem_openai_server.keys")

ENVIRONMENT = "SPECEM_SERVE_API_KEY"
"""The environment variable that gives ``specem serve`` its keys (as ``--api-key`` does,
several separated by spaces). Not ``SPECEM_API_KEY``: that is the key a remote member sends
to its own server where it has none of its own, so the clients' key would go to every such
member's server."""

Send = Callable[[dict[str, Any]], Awaitable[None]]


class KeysError(ValueError):
    """Keys that cannot be used: an unreadable key file, or one without a key."""


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def read_keys(path: Path) -> list[str]:
    """The keys in a key file; one that cannot be read or holds none raises
    :class:`KeysError` naming the file (never a key)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise KeysError(f"cannot read the key file {str(path)!r}: {error}") from None
    keys = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    if not keys:
        raise KeysError(f"the key file {str(path)!r} holds no key (one key a line)")
    return keys


class ApiKeys:
    """The keys a server accepts: those given, and those of the key file (read again by
    :meth:`reload`)."""

    def __init__(self, keys: Sequence[str] = (), file: Path | None = None) -> None:
        if any(not k.strip() or k != k.strip() for k in keys):
            raise KeysError("an API key may not be blank or start or end with a space")
        self.file = file
        self._given = [digest(k) for k in keys]
        self._digests = self._given + ([digest(k) for k in read_keys(file)] if file else [])

    def shared(self) -> dict[str, Any]:
        """What a worker process needs to check the same keys: the given keys' digests
        (never the keys) and the key file's path."""
        return {"digests": [d.hex() for d in self._given], "file": self.file and str(self.file)}

    @classmethod
    def from_shared(cls, data: dict[str, Any]) -> ApiKeys:
        keys = cls(file=Path(data["file"]) if data["file"] else None)
        keys._given = [bytes.fromhex(d) for d in data["digests"]]
        keys._digests = keys._given + keys._digests
        return keys

    @property
    def required(self) -> bool:
        """Whether requests need a key (any key is set)."""
        return bool(self._digests)

    def __len__(self) -> int:
        return len(self._digests)

    def reload(self) -> None:
        """Read the key file again; where it cannot be read or holds no key, keep the
        keys as they were and log why."""
        if self.file is None:
            return
        try:
            found = read_keys(self.file)
        except KeysError as error:
            log.error("API keys not reloaded, the %d in use stay: %s", len(self), error)
            return
        self._digests = self._given + [digest(k) for k in found]
        log.warning("API keys reloaded from %s: %d in use", self.file, len(self))

    def accepts(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header holds one of the keys as a bearer token
        (every key compared, each in constant time)."""
        if not authorization:
            return False
        scheme, _, token = authorization.partition(" ")
        sent = digest(token.strip())
        matched = False
        for known in self._digests:
            matched |= hmac.compare_digest(sent, known)
        return matched and scheme.lower() == "bearer"

    def install_reload(self) -> None:
        """Read the key file again on SIGHUP (in the server's main thread; a server run in
        another thread, as in tests, reloads by :meth:`reload` alone)."""
        if self.file is None or threading.current_thread() is not threading.main_thread():
            return
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.reload)


def unauthorized(sent: bool) -> APIError:
    why = (
        "the API key given in the Authorization header is not one of this server's keys"
        if sent
        else "this server needs an API key: send it in the Authorization header as "
        "'Bearer KEY' (the OpenAI client's api_key)"
    )
    return APIError(
        401,
        why,
        "invalid_request_error",
        "invalid_api_key",
        headers={"WWW-Authenticate": "Bearer"},
    )


class RequireKey:
    """ASGI middleware: a request under ``/v1/`` (and to ``/metrics`` with
    ``metrics_need_key``) without one of ``keys`` is a 401, counted in the metrics."""

    def __init__(self, app: Any, keys: ApiKeys, metrics_need_key: bool = False) -> None:
        self.app = app
        self.keys = keys
        self.guarded = ("/v1/", "/metrics") if metrics_need_key else ("/v1/",)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Send) -> None:
        if (
            scope["type"] != "http"
            or not self.keys.required
            or not scope["path"].startswith(self.guarded)
        ):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        if self.keys.accepts(authorization):
            await self.app(scope, receive, send)
            return
        metrics.rejected("invalid_api_key")
        await unauthorized(bool(authorization)).response()(scope, receive, send)
