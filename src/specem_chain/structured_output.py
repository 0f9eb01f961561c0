"""``with_structured_output``: a chat model's answer parsed into an object of a schema."""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.output_parsers import JsonOutputParser, PydanticOutputParser
from langchain_core.output_parsers.openai_tools import (
    JsonOutputKeyToolsParser,
    PydanticToolsParser,
)
from langchain_core.runnables import Runnable, RunnableLambda, RunnableMap, RunnablePassthrough
from langchain_core.utils.function_calling import convert_to_json_schema, convert_to_openai_tool
from langchain_core.utils.pydantic import is_basemodel_subclass
from pydantic import TypeAdapter
from typing_extensions import is_typeddict

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

Method = Literal["json_schema", "function_calling", "json_mode"]


def json_schema_format(schema: dict[str, Any] | type | None) -> dict[str, Any]:
    """An OpenAI ``json_schema`` response format for a Pydantic class, TypedDict or JSON
    schema."""
    json_schema = convert_to_json_schema(schema)
    name = json_schema.get("title", "answer")
    return {"type": "json_schema", "json_schema": {"name": name, "schema": json_schema}}


def structured_output(
    model: BaseChatModel,
    schema: dict[str, Any] | type | None,
    *,
    method: Method,
    include_raw: bool,
    **kwargs: Any,
) -> Runnable:
    """``model`` bound to answer in ``schema`` and piped into the parser for it."""
    if kwargs:
        raise ValueError(f"with_structured_output got unsupported arguments {sorted(kwargs)}")
    if method not in ("json_schema", "function_calling", "json_mode"):
        raise ValueError(
            f"method={method!r} is not 'json_schema', 'function_calling' or 'json_mode'"
        )
    if schema is None and method != "json_mode":
        raise ValueError(f"method={method!r} needs a schema; only 'json_mode' works without")
    pydantic_class = isinstance(schema, type) and is_basemodel_subclass(schema)
    traced = {"kwargs": {"method": method}, "schema": schema}
    parser: Runnable
    if method == "function_calling":
        name = convert_to_openai_tool(schema)["function"]["name"]
        llm = model.bind_tools([schema], tool_choice=name, ls_structured_output_format=traced)
        if pydantic_class:
            parser = PydanticToolsParser(tools=[schema], first_tool_only=True)
        else:
            parser = JsonOutputKeyToolsParser(key_name=name, first_tool_only=True)
    else:
        response_format: dict[str, Any] = {"type": "json_object"}
        if method == "json_schema":
            response_format = json_schema_format(schema)
        llm = model.bind(response_format=response_format, ls_structured_output_format=traced)
        if pydantic_class:
            parser = PydanticOutputParser(pydantic_object=schema)
        else:
            parser = JsonOutputParser()
    if isinstance(schema, type) and is_typeddict(schema):
        parser = parser | RunnableLambda(TypeAdapter(schema).validate_python)
    if not include_raw:
        return llm | parser
    parsed = RunnablePassthrough.assign(
        parsed=itemgetter("raw") | parser, parsing_error=lambda _: None
    )
    unparsed = RunnablePassthrough.assign(parsed=lambda _: None)
    return RunnableMap(raw=llm) | parsed.with_fallbacks([unparsed], exception_key="parsing_error")
