"""A request's updates as Haystack streaming chunks, and its answer as the reply.

Every round gives a chunk of its prose, and a chunk per tool call completed in it (a chunk
holds text or tool calls, not both); a round that released neither gives an empty chunk,
so no round is lost. Content blocks are numbered in order: the prose up to a call is one
block, each call is one, and prose after a call starts a new one (``start`` marks a
block's first chunk). The round's provenance rides on its first chunk
(``meta["specem"]["segments"]``); the last chunk also carries ``finish_reason``, ``usage``
and the answer's provenance summary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from haystack.dataclasses import (
    ChatMessage,
    ComponentInfo,
    StreamingChunk,
    ToolCall,
    ToolCallDelta,
)
from specem_chain import Answer, Update
from specem_chain.request import segment_record


@dataclass
class Reply:
    """One answer as it streams: its chunks' content blocks, then the reply."""

    model: str
    component_info: ComponentInfo | None = None
    text: list[str] = field(default_factory=list)
    started_at: str | None = None
    _block: int = field(default=-1, init=False)
    """The current content block's index."""
    _in_text: bool = field(default=False, init=False)
    """Whether the current block is prose."""

    def chunks(self, update: Update, answer: Answer) -> list[StreamingChunk]:
        """The round's chunks (one, or one more per completed tool call)."""
        now = datetime.now(timezone.utc).isoformat()
        self.started_at = self.started_at or now
        pieces: list[dict[str, Any]] = []
        if update.text or not any(call.valid for call in update.tool_calls):
            start = bool(update.text) and not self._in_text
            if start:
                self._block += 1
                self._in_text = True
            index = self._block if update.text else None
            pieces.append({"content": update.text, "index": index, "start": start})
        for call in update.tool_calls:
            if not call.valid:
                continue
            self._block += 1
            self._in_text = False
            delta = ToolCallDelta(
                index=self._block,
                tool_name=call.name,
                arguments=json.dumps(call.args, ensure_ascii=False),
                id=call.id,
            )
            pieces.append(
                {"content": "", "index": self._block, "start": True, "tool_calls": [delta]}
            )
        self.text.append(update.text)
        meta = [{"model": self.model, "received_at": now} for _ in pieces]
        meta[0]["specem"] = {"segments": [segment_record(update.event)]}
        if update.finished:
            final = self.meta(answer)
            pieces[-1]["finish_reason"] = final["finish_reason"]
            meta[-1]["usage"] = final["usage"]
            meta[-1].setdefault("specem", {}).update(final["specem"])
        return [
            StreamingChunk(meta=m, component_info=self.component_info, **piece)
            for piece, m in zip(pieces, meta)
        ]

    def meta(self, answer: Answer) -> dict[str, Any]:
        """The reply's metadata: model, finish reason, usage and the specem provenance (with
        the calls that could not be read, if any)."""
        return {
            "model": self.model,
            "finish_reason": answer.stop_reason,
            "usage": answer.tokens.openai(),
            "specem": answer.metadata(),
        }

    def reply(self, answer: Answer) -> ChatMessage:
        """The whole answer as one assistant message: the chunks' text and tool calls, and
        the provenance of every round under ``meta["specem"]["segments"]``."""
        meta = self.meta(answer)
        meta["specem"]["segments"] = answer.segments()
        calls = [
            ToolCall(tool_name=c.name, arguments=c.args, id=c.id)
            for c in answer.tool_calls
            if c.valid
        ]
        return ChatMessage.from_assistant(
            text="".join(self.text) or None,
            tool_calls=calls or None,
            meta={**meta, "index": 0, "completion_start_time": self.started_at},
        )
