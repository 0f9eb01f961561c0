"""A specem answer in the OpenAI format: a completion, or a chunk per round."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from specem_chain import Answer, Update
from specem_chain.engine.tool_calls import ParsedCall
from specem_chain.request import segment_record

from .schema import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChunkChoice,
    Delta,
    DeltaToolCall,
    FunctionCall,
    ToolCall,
    Usage,
)


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def function_of(call: ParsedCall) -> FunctionCall:
    return FunctionCall(name=call.name or "", arguments=json.dumps(call.args, ensure_ascii=False))


def valid_calls(calls: Iterable[ParsedCall]) -> list[ParsedCall]:
    """The calls that parse; the others are named in the provenance instead."""
    return [call for call in calls if call.valid]


def usage_of(answer: Answer) -> Usage:
    """Prompt tokens summed over the members; completion tokens: every token every member
    drafted (the answer's real cost)."""
    return Usage(**answer.tokens.openai())


def completion(model: str, answer: Answer, text: str) -> ChatCompletion:
    """The whole answer; ``text`` is its prose (the tool-call blocks taken out)."""
    calls = [ToolCall(id=c.id, function=function_of(c)) for c in valid_calls(answer.tool_calls)]
    message = AssistantMessage(content=text or (None if calls else ""), tool_calls=calls or None)
    return ChatCompletion(
        id=completion_id(),
        created=int(time.time()),
        model=model,
        choices=[Choice(message=message, finish_reason=answer.stop_reason or "stop")],
        usage=usage_of(answer),
        specem=answer.metadata() | {"segments": answer.segments()},
    )


@dataclass
class Chunks:
    """One streamed answer's chunks: one per round, then the finish and the usage."""

    model: str
    id: str = field(default_factory=completion_id)
    created: int = field(default_factory=lambda: int(time.time()))
    calls: int = 0
    """Calls sent so far: the next one's index."""

    def chunk(self, choices: list[ChunkChoice], **fields: Any) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=self.id, created=self.created, model=self.model, choices=choices, **fields
        )

    def round(self, update: Update, answer: Answer, first: bool = False) -> ChatCompletionChunk:
        """A round's text and completed calls, with its segment (and, on the last round,
        the answer's provenance summary)."""
        calls = [
            DeltaToolCall(index=self.calls + n, id=c.id, function=function_of(c))
            for n, c in enumerate(valid_calls(update.tool_calls))
        ]
        self.calls += len(calls)
        delta = Delta(
            role="assistant" if first else None, content=update.text, tool_calls=calls or None
        )
        specem = (answer.metadata() if update.finished else {}) | {
            "segments": [segment_record(update.event)]
        }
        return self.chunk([ChunkChoice(delta=delta)], specem=specem)

    def finish(self, answer: Answer) -> ChatCompletionChunk:
        return self.chunk([ChunkChoice(delta=Delta(), finish_reason=answer.stop_reason or "stop")])

    def usage(self, answer: Answer) -> ChatCompletionChunk:
        return self.chunk([], usage=usage_of(answer))
