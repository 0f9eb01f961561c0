"""OpenAI's published OpenAPI description (``openai_protocol/``, MIT; see its README) and
the checks of a response against its schemas: OpenAPI 3.0 schemas read by
openapi-schema-validator as OpenAPI 3.0.3 says (``nullable`` included), with the document's
own ``$ref``s resolved in it, and one reading of OpenAI's own (:data:`Validator`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema.validators import extend
from openapi_schema_validator import OAS30StrictValidator
from referencing import Registry
from referencing.jsonschema import DRAFT4

PROTOCOL = Path(__file__).parent / "openai_protocol"
DESCRIPTION = PROTOCOL / "openapi.json"
OPENAI = json.loads(DESCRIPTION.read_text())
"""OpenAI's OpenAPI description, info.version 2.3.0."""

REGISTRY = Registry().with_resource("urn:openai", DRAFT4.create_resource(OPENAI))


def nullable_enum(validator: Any, enum: Any, instance: Any, schema: dict[str, Any]) -> Any:
    if instance is None and schema.get("nullable") is True:
        return
    yield from OAS30StrictValidator.VALIDATORS["enum"](validator, enum, instance, schema)


Validator = extend(OAS30StrictValidator, {"enum": nullable_enum})
"""OpenAPI 3.0.3, strictly, but for one reading: ``nullable: true`` admits null beside an
``enum`` that does not list it. OpenAI's description means it so: a chunk's
``finish_reason`` is required, ``nullable`` with an enum of reasons, and null in every chunk
but the last, as OpenAI's own API sends it and its SDKs (generated from this description)
read it. (3.0.3's letter would need null in the enum.)"""


def violations(instance: Any, schema: str) -> list[str]:
    """Where ``instance`` breaks OpenAI's schema ``schema`` (a name under
    ``components.schemas``), each as ``path: why``; none where it conforms."""
    validator = Validator({"$ref": f"urn:openai#/components/schemas/{schema}"}, registry=REGISTRY)
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(instance)]


def conforms(instance: Any, schema: str) -> None:
    """Fail, naming every violation, unless ``instance`` conforms to OpenAI's ``schema``."""
    problems = violations(instance, schema)
    assert not problems, f"not an OpenAI {schema}: {problems}\n{json.dumps(instance)[:2000]}"


def events(text: str) -> list[str]:
    """The data of every server-sent event in a response's ``text``."""
    return [e.removeprefix("data: ") for e in text.split("\n\n") if e.startswith("data: ")]


def stream_conforms(text: str) -> list[dict[str, Any]]:
    """Check a whole streamed answer: every event an OpenAI chunk and the last ``[DONE]``;
    the chunks, in order."""
    data = events(text)
    assert data and data[-1] == "[DONE]", data[-3:]
    chunks = [json.loads(d) for d in data[:-1]]
    for chunk in chunks:
        conforms(chunk, "CreateChatCompletionStreamResponse")
    return chunks
