"""Candidate constraints: pure functions the engine applies to each candidate segment before
verification, so the ensemble can never accept a segment that breaks the answer's required
syntax."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic_core import from_json

from .tool_calls import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from .types import Fits, Segment

_WS = " \t\n\r"
_WS_RUN = re.compile("[ \t\n\r]*")
_ESCAPES = '"\\/bfnrt'
_HEX = "0123456789abcdefABCDEF"
_LITERALS = {"t": "true", "f": "false", "n": "null"}
_CLOSERS = {"{": "}", "[": "]"}
# Inside an escape sequence ("u4" to "u1": the hex digits still due in a \u escape) or a
# literal ("true" after its "t" is "literal:rue"), the one character each state takes, and
# the state it moves to.
_INSIDE: dict[str, dict[str, str]] = {
    "escape": {"u": "u4", **dict.fromkeys(_ESCAPES, "string")},
    **{f"u{n}": dict.fromkeys(_HEX, f"u{n - 1}" if n > 1 else "string") for n in range(1, 5)},
    **{
        f"literal:{rest}": {rest[0]: f"literal:{rest[1:]}" if rest[1:] else "after_value"}
        for word in _LITERALS.values()
        for rest in (word[k:] for k in range(1, len(word)))
    },
}
_IN_STRING = {"string", "escape", "u4", "u3", "u2", "u1"}
# A number's states and their moves, by character class ("1" stands for any of 1-9).
_NUMBER = {
    "minus": {"0": "zero", "1": "int"},
    "zero": {".": "dot", "e": "exp_mark"},
    "int": {"0": "int", "1": "int", ".": "dot", "e": "exp_mark"},
    "dot": {"0": "frac", "1": "frac"},
    "frac": {"0": "frac", "1": "frac", "e": "exp_mark"},
    "exp_mark": {"0": "exp", "1": "exp", "+": "exp_sign", "-": "exp_sign"},
    "exp_sign": {"0": "exp", "1": "exp"},
    "exp": {"0": "exp", "1": "exp"},
}
_NUMBER_ENDS = {"zero", "int", "frac", "exp"}
# The end of a number cut where a digit must follow (pydantic's partial reading drops it).
_CUT_NUMBER = re.compile(r"(?:-|\d\.|\d[eE]|[eE][+-])\Z")
# The start of a tool call's object up to its name, the name so far, and its closing quote.
_NAME_START = re.compile(r' \{ "name" : "([^"\\]*)("?)'.replace(" ", "[ \t\n\r]*"))


class Constraint(Protocol):
    def __call__(self, answer: str, segment: Segment) -> Segment | None:
        """``segment`` as it may be accepted after ``answer``: unchanged, cut short (and then
        finished, because the answer is complete), or None when it breaks the syntax."""
        ...

    def closing(self, answer: str) -> str | None:
        """The shortest text that completes ``answer`` in the format, if it can be completed
        now (everything the format requires is written); else None."""
        ...


@dataclass(frozen=True)
class AnswerFormat:
    """What shape an answer must take: text it starts with (``prefix``, accepted before the
    first round as if the members had written it) and a constraint on every candidate."""

    prefix: str = ""
    constraint: Constraint | None = None

    def shape(self, answer: str, segment: Segment) -> Segment | None:
        """``segment`` as it may be accepted after ``answer``, or None."""
        return segment if self.constraint is None else self.constraint(answer, segment)

    def fits(self, answer: str) -> Fits | None:
        """Whether a draft may follow ``answer`` (whole or cut where the format ends), for
        members that draft under the format token by token; None when any text may."""
        if (constraint := self.constraint) is None:
            return None
        return lambda text, finished: constraint(answer, Segment(text, finished)) is not None

    def fallback(self, answer: str) -> list[Segment]:
        """What the format offers itself in a round where no member's candidate fits it: a
        finished segment that closes ``answer`` when the members wrote all the format needs
        and then went astray (a key the schema does not have, say); else each way on that
        the format knows (the rest of every tool name that fits what is written, with the
        start of its arguments), for the verifiers to choose from. Empty if there is none."""
        closing = getattr(self.constraint, "closing", None)
        if (text := closing(answer) if closing else None) is not None:
            return [Segment(text, finished=True)]
        choices = getattr(self.constraint, "choices", None)
        return [Segment(text) for text in choices(answer)] if choices else []

    def shape_start(self, answer: str, segment: Segment) -> Segment | None:
        """The longest non-empty start of ``segment`` (unfinished) that may be accepted after
        ``answer``, or None: for a round where no candidate fits whole, so the answer still
        moves on as far as the members agree with the format."""
        for end in range(len(segment.text) - 1, 0, -1):
            cut = self.shape(answer, Segment(segment.text[:end]))
            if cut is not None and cut.text:
                return cut
        return None


@dataclass(frozen=True)
class JsonScan:
    """How far a text is a JSON document (a top-level object or array, after whitespace)."""

    valid: bool
    """The text (up to ``end`` when complete) is a prefix of a valid JSON document."""
    end: int | None
    """Index just past the top-level value when it is complete, else None."""
    key: LastKey | None = None
    """The latest key of the innermost open object, when the text is incomplete."""
    closers: str | None = None
    """When the text is incomplete and stops where its open containers may close (after
    a value, or just inside an empty one): the brackets that close them."""
    open_path: tuple[str | None, ...] = ()
    """When the text is incomplete: where its innermost open container is, a key per
    enclosing object and None per enclosing array (every other container is closed)."""


@dataclass(frozen=True)
class LastKey:
    """The key an incomplete JSON text wrote last in its innermost open object."""

    path: tuple[str | None, ...]
    """Where that object is: a key per enclosing object, None per enclosing array."""
    name: str
    """The key as written so far (without its escape sequences)."""
    closed: bool
    """The key's closing quote is written."""


_INVALID = JsonScan(False, None)


@dataclass
class _Open:
    """A container a scan is inside: its bracket, its latest key (None in an array) and its
    keys as written."""

    bracket: str
    key: str | None = None
    written: set[str] = field(default_factory=set)


def scan_json(text: str) -> JsonScan:
    """Scan ``text`` as a JSON document (RFC 8259), stopping where its top-level value ends.
    An object that repeats a key is refused: RFC 8259 leaves its meaning to the reader."""
    # a state machine over the characters: what may come next (a state below, a string,
    # escape or literal state of _INSIDE, or a number state), the containers open, and
    # the object key being read (from key_start on; key without its escapes)
    stack: list[_Open] = []
    state, in_key, key, key_start = "value", False, "", 0
    for i, char in enumerate(text):
        if state in _NUMBER:
            move = _NUMBER[state].get("1" if char in "123456789" else char.lower())
            if move:
                state = move
                continue
            if state not in _NUMBER_ENDS:
                return _INVALID
            state = "after_value"  # the number ended: scan this character after it
        if state == "string":
            if char == '"':
                state = "colon" if in_key else "after_value"
                if in_key:
                    if text[key_start:i] in stack[-1].written:
                        return _INVALID
                    stack[-1].key = key
                    stack[-1].written.add(text[key_start:i])
            elif char == "\\":
                state = "escape"
            elif char < " ":
                return _INVALID
            elif in_key:
                key += char
        elif state in _INSIDE:
            state = _INSIDE[state].get(char, "")
            if not state:
                return _INVALID
        elif char in _WS:
            continue
        elif state in ("value", "value_or_close"):  # after start, "[", "," in an array, ":"
            state = _value(stack, state, char)
            if not state:
                return _INVALID
            in_key = False
        elif state in ("key", "key_or_close"):  # after "," in an object, after "{"
            if char == '"':
                state, in_key, key, key_start = "string", True, "", i + 1
            elif char == "}" and state == "key_or_close":
                stack.pop()
                state = "after_value"
            else:
                return _INVALID
        elif state == "colon":
            if char != ":":
                return _INVALID
            state = "value"
        elif char == ",":  # after_value
            state = "key" if stack[-1].bracket == "{" else "value"
        elif char == _CLOSERS[stack[-1].bracket]:
            stack.pop()
        else:
            return _INVALID
        if state == "after_value" and not stack:
            return JsonScan(True, i + 1)
    return _unfinished(stack, state, in_key, key)


def _value(stack: list[_Open], state: str, char: str) -> str:
    """The state after ``char`` where a value may start (or, in "value_or_close", an empty
    array close): "" when it may not."""
    if char in "{[":
        stack.append(_Open(char))
        return "key_or_close" if char == "{" else "value_or_close"
    if char == "]" and state == "value_or_close":
        stack.pop()
        return "after_value"
    if not stack:
        return ""  # a top-level scalar
    if char == '"':
        return "string"
    if char in "-0123456789":
        return {"-": "minus", "0": "zero"}.get(char, "int")
    if char in _LITERALS:
        return f"literal:{_LITERALS[char][1:]}"
    return ""


def _unfinished(stack: list[_Open], state: str, in_key: bool, key: str) -> JsonScan:
    """The scan of a text that ends before its top-level value does, in ``state`` with
    ``stack`` open (``key``: the object key being read, when ``in_key``)."""
    closable = state in ("after_value", "key_or_close", "value_or_close") or state in _NUMBER_ENDS
    closers = "".join(_CLOSERS[c.bracket] for c in reversed(stack)) if closable else None
    path = tuple(c.key for c in stack[:-1])
    if not stack or stack[-1].bracket != "{":
        return JsonScan(True, None, closers=closers, open_path=path)
    if state in _IN_STRING and in_key:
        return JsonScan(True, None, LastKey(path, key, closed=False), open_path=path)
    if state == "key":  # after a comma: a key must follow
        return JsonScan(True, None, LastKey(path, "", closed=False), open_path=path)
    last = None if stack[-1].key is None else LastKey(path, stack[-1].key, True)
    return JsonScan(True, None, last, closers, path)


def _scan_object(text: str) -> JsonScan:
    """``scan_json`` for a document that must be an object."""
    return _INVALID if text.lstrip(_WS).startswith("[") else scan_json(text)


def _cut(answer: str, segment: Segment, end: int) -> Segment:
    """``segment`` cut where ``answer + segment.text`` is complete, ending the answer."""
    return Segment(segment.text[: max(end - len(answer), 0)], finished=True)


def _open(segment: Segment) -> Segment | None:
    """``segment`` when the answer stays incomplete after it: it must not end the turn."""
    return None if segment.finished else segment


def property_names(schema: dict[str, Any]) -> tuple[str, ...]:
    """Every key a schema names for an object, at any depth, in order."""
    names: dict[str, None] = {}
    parts = [schema]
    while parts:
        part = parts.pop(0)
        properties = part.get("properties")
        if isinstance(properties, dict):
            names.update(dict.fromkeys(properties))
            parts.extend(p for p in properties.values() if isinstance(p, dict))
        for nested in ("items", "additionalProperties"):
            if isinstance(part.get(nested), dict):
                parts.append(part[nested])
        parts.extend(p for p in part.get("anyOf", part.get("oneOf", [])) if isinstance(p, dict))
    return tuple(names)


def key_choices(constraint: Constraint, answer: str, names: Iterable[str]) -> tuple[str, ...]:
    """Where ``answer`` stops just after ``{`` or ``,`` in an object: each key of ``names``
    that the constraint lets start there (``"key": ``)."""
    if not answer.rstrip(_WS).endswith(("{", ",")):
        return ()
    texts = dict.fromkeys(f'"{name}": ' for name in names)
    return tuple(t for t in texts if constraint(answer, Segment(t)) is not None)


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def schema_types(schema: dict[str, Any]) -> set[str] | None:
    """The JSON types a schema allows; None when it does not say (``$ref``, ``enum``...)."""
    if isinstance(kind := schema.get("type"), str):
        return {kind}
    if isinstance(kind, list):
        return set(kind)
    options = schema.get("anyOf") or schema.get("oneOf")
    if not options:
        return None
    types: set[str] = set()
    for option in options:
        if (option_types := schema_types(option)) is None:
            return None
        types |= option_types
    return types


def fits_schema(
    value: Any, schema: dict[str, Any], *, open_path: tuple[str | None, ...] | None
) -> bool:
    """Whether ``value``, parsed from a JSON prefix, can still become valid for ``schema``.

    Checks what small models get wrong: JSON types, keys the schema does not name (unless
    ``additionalProperties`` is true) and missing required keys in every object that is
    closed. ``open_path`` is where the prefix's innermost open container is, from
    ``value`` (:attr:`JsonScan.open_path`; ``()``: ``value`` itself), or None when
    ``value`` is complete. Parts of a schema it cannot judge (``$ref``, ``enum``,
    formats) pass.
    """
    types = schema_types(schema)
    if types is not None and not any(
        isinstance(value, _JSON_TYPES.get(t, ()))
        and not (isinstance(value, bool) and t in ("integer", "number"))
        for t in types
    ):
        return False
    properties = schema.get("properties")
    if not isinstance(value, dict) or not isinstance(properties, dict):
        return True
    if schema.get("additionalProperties") is not True and not set(value) <= set(properties):
        return False
    if open_path is None and not set(schema.get("required", ())) <= set(value):
        return False
    return all(
        fits_schema(
            v, properties[k], open_path=open_path[1:] if open_path and open_path[0] == k else None
        )
        for k, v in value.items()
        if k in properties
    )


def key_fits(key: LastKey, schema: dict[str, Any], value: Any) -> bool:
    """Whether a key being written can still be one that its object's schema names and,
    while it is unfinished, one the object (in ``value``, parsed so far) has not written."""
    for step in key.path:
        schema = schema.get("items", {}) if step is None else schema.get("properties", {})
        schema = schema if step is None else schema.get(step, {})
        value = _step(value, step)
        if not isinstance(schema, dict):
            return True
    properties = schema.get("properties")
    if not isinstance(properties, dict) or schema.get("additionalProperties") is True:
        return True
    if key.closed:
        return key.name in properties
    written = value if isinstance(value, dict) else {}
    return any(name.startswith(key.name) for name in properties if name not in written)


def _step(value: Any, step: str | None) -> Any:
    """The part of a partial value at one step of a path (the last item of an array)."""
    if step is None:
        return value[-1] if isinstance(value, list) and value else None
    return value.get(step) if isinstance(value, dict) else None


def json_fits(text: str, scan: JsonScan, schema: dict[str, Any]) -> bool:
    """Whether a valid JSON prefix (``scan`` of ``text``) can still become valid for
    ``schema``: its values so far (:func:`fits_schema`) and the key it is writing."""
    head = text[: scan.end]
    if scan.end is None and _CUT_NUMBER.search(head):
        head += "0"  # a number cut after its point, exponent or sign: judged as it goes on
    try:
        value = from_json(head, allow_partial="trailing-strings")
    except ValueError:  # a prefix pydantic cannot read: nothing to judge yet
        return True
    if scan.key is not None and not key_fits(scan.key, schema, value):
        return False
    return fits_schema(value, schema, open_path=None if scan.end is not None else scan.open_path)


@dataclass(frozen=True)
class JsonObjectAnswer:
    """The answer is one JSON object, fitting ``schema`` when given (:func:`fits_schema`);
    text after it is cut off and the answer ends."""

    schema: dict[str, Any] | None = None

    def __call__(self, answer: str, segment: Segment) -> Segment | None:
        full = answer + segment.text
        scan = _scan_object(full)
        if not scan.valid:
            return None
        if self.schema is not None and not json_fits(full, scan, self.schema):
            return None
        return _open(segment) if scan.end is None else _cut(answer, segment, scan.end)

    def closing(self, answer: str) -> str | None:
        scan = _scan_object(answer)
        text = scan.closers
        return text if text and self(answer, Segment(text, finished=True)) else None

    def choices(self, answer: str) -> tuple[str, ...]:
        return key_choices(self, answer, property_names(self.schema or {}))


@dataclass(frozen=True)
class EitherAnswer:
    """The answer takes the first of several formats that its start fits (a tool call or a
    JSON object, say): once it has begun in one, the others refuse it."""

    formats: tuple[Constraint, ...]

    def __call__(self, answer: str, segment: Segment) -> Segment | None:
        for constraint in self.formats:
            if (shaped := constraint(answer, segment)) is not None:
                return shaped
        return None

    def closing(self, answer: str) -> str | None:
        return next((c for f in self.formats if (c := f.closing(answer)) is not None), None)

    def choices(self, answer: str) -> tuple[str, ...]:
        found = (getattr(f, "choices", None) for f in self.formats)
        return tuple(
            dict.fromkeys(text for choices in found if choices for text in choices(answer))
        )


@dataclass(frozen=True)
class ToolCallAnswer:
    """The answer is one or more calls of the tools in ``parameters`` (a tool's name and the
    JSON schema of its arguments), each a JSON object with ``name`` and ``arguments`` fitting
    the schema (:func:`fits_schema`) between ``TOOL_CALL_OPEN`` and ``TOOL_CALL_CLOSE``
    (Hermes format). Text after a complete call that cannot start another one is cut off
    and the answer ends."""

    parameters: dict[str, dict[str, Any]]
    single: bool = False
    """At most one call: the answer ends after the first."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.parameters)

    def __call__(self, answer: str, segment: Segment) -> Segment | None:
        full = answer + segment.text
        pos, cut = 0, None  # cut: just past the last complete call
        while True:
            pos = _WS_RUN.match(full, pos).end()
            if not full.startswith(TOOL_CALL_OPEN, pos):
                if not TOOL_CALL_OPEN.startswith(full[pos:]):
                    return None if cut is None else _cut(answer, segment, cut)
                return segment if cut is not None and pos == len(full) else _open(segment)
            pos += len(TOOL_CALL_OPEN)
            scan = _scan_object(full[pos:])
            name = _NAME_START.match(full, pos)
            if not scan.valid or not self._name_fits(name, len(full)):
                return None
            if TOOL_CALL_CLOSE in full[pos : pos + (scan.end or len(full))]:
                return None  # the closing tag in a string would end the block for a reader
            if not json_fits(full[pos:], scan, self._call_schema(name)):
                return None
            if scan.end is None:
                return _open(segment)
            if not self._is_call(full[pos : pos + scan.end]):
                return None
            end = pos + scan.end
            pos = _WS_RUN.match(full, end).end()
            if not full.startswith(TOOL_CALL_CLOSE, pos):
                # The call is complete: its closing tag may follow, or the turn may end here
                # (anything else, such as a second call without the tags, is cut off).
                if TOOL_CALL_CLOSE.startswith(full[pos:]):
                    return segment
                return _cut(answer, segment, end)
            pos = cut = pos + len(TOOL_CALL_CLOSE)
            if self.single:
                return _cut(answer, segment, cut)

    def closing(self, answer: str) -> str | None:
        """The brackets and closing tag that end the call being written."""
        start = answer.rfind(TOOL_CALL_OPEN)
        if start < 0 or TOOL_CALL_CLOSE in answer[start:]:
            return None
        closers = _scan_object(answer[start + len(TOOL_CALL_OPEN) :]).closers
        if not closers:
            return None
        text = f"{closers}\n{TOOL_CALL_CLOSE}"
        return text if self(answer, Segment(text, finished=True)) else None

    def choices(self, answer: str) -> tuple[str, ...]:
        """When ``answer`` ends inside a call's name: for each tool whose name completes it,
        the rest of the name and the start of its arguments; where a key of its arguments
        may start, each key that fits there (:func:`key_choices`)."""
        start = answer.rfind(TOOL_CALL_OPEN)
        if start < 0:
            return ()
        match = _NAME_START.match(answer, start + len(TOOL_CALL_OPEN))
        if match is None or match.group(2) or match.end() != len(answer):
            keys = (n for schema in self.parameters.values() for n in property_names(schema))
            return key_choices(self, answer, keys)
        written = match.group(1)
        texts = (
            n[len(written) :] + '", "arguments": {' for n in self.names if n.startswith(written)
        )
        return tuple(t for t in texts if self(answer, Segment(t)) is not None)

    def _name_fits(self, match: re.Match[str] | None, end: int) -> bool:
        """The call's name, as far as it is written (``_NAME_START``'s match on the call, in
        a text of ``end`` characters), can still be one of the names; a name that goes on
        with an escape sequence cannot (no tool's name needs one)."""
        if match is None:
            return True
        name, closed = match.groups()
        if closed:
            return name in self.names
        return match.end() == end and any(n.startswith(name) for n in self.names)

    def _call_schema(self, match: re.Match[str] | None) -> dict[str, Any]:
        """The schema of a call, with its tool's arguments once its name (the first key, as
        the answer's prefix writes it; ``_NAME_START``'s match) is complete."""
        tool = match.group(1) if match and match.group(2) else None
        return {
            "type": "object",
            "properties": {"name": {"type": "string"}, "arguments": self.parameters.get(tool, {})},
            "required": ["name", "arguments"],
        }

    def _is_call(self, text: str) -> bool:
        """``text`` (a complete JSON object) calls one of the names with object arguments."""
        call = json.loads(text)
        return call.get("name") in self.names and isinstance(call.get("arguments"), dict)
