"""Find tool calls in the ensemble's answer text.

Models with a tool template (Hermes, Qwen2.5) write each call as a tagged block::

    <tool_call>
    {"name": "get_weather", "arguments": {"location": "Paris"}}
    </tool_call>

with prose around it; the closing tag may be missing when the turn ended right after the
JSON. Models without one answer a bare JSON call, possibly in a ```json fence. The answer is
streamed, so `ToolCallSplitter` releases prose as soon as it cannot be part of a call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

_FENCE = re.compile(r"```(?i:json)?(.*?)(?:```)?", re.DOTALL)
_NAME = re.compile(r'^\s*\{\s*"name"\s*:\s*"([^"\\]+)"')


@dataclass(frozen=True)
class ParsedCall:
    """One tool call found in the answer text."""

    text: str  # the call's raw text (a block's inner text, or the bare JSON)
    name: str | None  # the tool name, when one could be read
    args: dict[str, Any] | None  # the arguments; None when the call is invalid
    error: str | None = None  # why the call is invalid; None when valid
    id: str = ""  # given by the request, the same for every front end

    @property
    def valid(self) -> bool:
        return self.error is None

    def record(self) -> dict[str, Any]:
        """The call as plain data, as front ends report a call that could not be read."""
        return {"name": self.name, "text": self.text, "error": self.error}


def _loads(text: str) -> tuple[Any, str | None]:
    """``json.loads(text)`` and None, or None and why it failed."""
    try:
        return json.loads(text), None
    except (ValueError, RecursionError) as exc:
        return None, f"not valid JSON: {exc}"


def parse_call(text: str) -> ParsedCall:
    """Read one call: a JSON object with a ``name`` and optional ``arguments`` (or
    ``parameters``): an object, or a string holding one."""
    call, error = _loads(text)
    if error:  # cut short, say: its name may still be readable
        name = _NAME.search(text)
        return ParsedCall(text, name.group(1) if name else None, None, error)
    if not isinstance(call, dict):
        return ParsedCall(text, None, None, "not a JSON object")
    name = call.get("name")
    if not isinstance(name, str) or not name:
        return ParsedCall(text, None, None, 'no "name"')
    key = "arguments" if "arguments" in call else "parameters"
    args = call.get(key, {})
    if isinstance(args, str):
        args, error = _loads(args)
        if error:
            return ParsedCall(text, name, None, f'"{key}" is a string but {error}')
    if not isinstance(args, dict):
        return ParsedCall(text, name, None, f'"{key}" is not an object')
    return ParsedCall(text, name, args)


def _safe_end(text: str) -> int:
    """Where the prose that cannot start a block ends: before the longest tail that is a
    prefix of the opening tag and the whitespace before it."""
    held = next(
        (k for k in range(len(TOOL_CALL_OPEN) - 1, 0, -1) if text.endswith(TOOL_CALL_OPEN[:k])), 0
    )
    return len(text[: len(text) - held].rstrip())


class ToolCallSplitter:
    """Splits streamed answer text into prose and tool calls, as early as it safely can."""

    def __init__(self, names: Collection[str]) -> None:
        self._names = frozenset(names)  # the bound tools' names, for bare JSON calls
        self._held = ""
        self._mode = "start"  # "start" | "bare" | "prose" | "block"
        self._after_block = False

    def feed(self, text: str) -> list[str | ParsedCall]:
        """The pieces that `text` completes; [] when nothing can be released yet."""
        self._held += text
        if self._mode == "start":
            head = self._held.lstrip()
            if head.startswith(("{", "```")):
                self._mode = "bare"  # maybe a bare JSON call: hold it all until the end
            elif head not in ("", "`", "``"):
                self._mode = "prose"
        return self._split(final=False) if self._mode in ("prose", "block") else []

    def step(self, text: str, last: bool) -> tuple[str, list[ParsedCall]]:
        """The prose and the calls that ``text`` completes (all that is held, if ``last``)."""
        pieces = self.feed(text) + (self.finish() if last else [])
        prose = "".join(p for p in pieces if isinstance(p, str))
        return prose, [p for p in pieces if isinstance(p, ParsedCall)]

    def finish(self) -> list[str | ParsedCall]:
        """The pieces still held at the end of the answer."""
        if self._mode == "bare" and TOOL_CALL_OPEN not in self._held:
            held, self._held = self._held, ""
            fenced = _FENCE.fullmatch(held.strip())
            call = parse_call((fenced.group(1) if fenced else held).strip())
            if call.valid and call.name in self._names:
                return [call]
            return [held] if held else []
        if self._mode != "block":
            self._mode = "prose"
        return self._split(final=True)

    def _split(self, final: bool) -> list[str | ParsedCall]:
        pieces: list[str | ParsedCall] = []
        while True:
            if self._mode == "block":
                end = self._held.find(TOOL_CALL_CLOSE)
                if end < 0 and not final:
                    return pieces
                if end < 0:  # unterminated at the end: parse what is there
                    end = len(self._held)
                pieces.append(parse_call(self._held[:end]))
                self._held = self._held[end + len(TOOL_CALL_CLOSE) :]
                self._mode, self._after_block = "prose", True
                continue
            if self._after_block:  # drop the whitespace right after a block
                self._held = self._held.lstrip()
                self._after_block = not self._held
            start = self._held.find(TOOL_CALL_OPEN)
            if start < 0:
                end = len(self._held) if final else _safe_end(self._held)
                prose, self._held = self._held[:end], self._held[end:]
                return [*pieces, prose] if prose else pieces
            prose = self._held[:start].rstrip()  # drop the whitespace right before a block
            if prose:
                pieces.append(prose)
            self._held = self._held[start + len(TOOL_CALL_OPEN) :]
            self._mode = "block"


def split_tool_calls(text: str, names: Collection[str]) -> list[str | ParsedCall]:
    """feed(text) + finish(), with adjacent prose pieces joined."""
    splitter = ToolCallSplitter(names)
    pieces: list[str | ParsedCall] = []
    for piece in splitter.feed(text) + splitter.finish():
        if isinstance(piece, str) and pieces and isinstance(pieces[-1], str):
            pieces[-1] += piece
        else:
            pieces.append(piece)
    return pieces
