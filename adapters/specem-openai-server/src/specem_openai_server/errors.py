"""Errors as OpenAI-shaped answers: the caller's fault (400; 401 without a valid key, 413 for
a body too large, 429 when the server is full), the members' or the feedback store's (503),
an answer past its time (504) or ours (500)."""

from __future__ import annotations

from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from specem_chain.errors import (
    AnswerFormatError,
    FeedbackError,
    PromptTooLongError,
    RequestError,
    SpecEMError,
)
from starlette.exceptions import HTTPException

from .schema import ErrorBody, ErrorResponse


class APIError(Exception):
    """An error to answer with an OpenAI-shaped body and an HTTP status."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers
        self.body = ErrorResponse(
            error=ErrorBody(message=message, type=kind, param=param, code=code)
        )

    def response(self) -> JSONResponse:
        return JSONResponse(self.body.model_dump(), status_code=self.status, headers=self.headers)


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    "4XX": {
        "model": ErrorResponse,
        "description": "The request's fault, in OpenAI's error shape: 400 (a field, a limit "
        "or the body, named), 401 (no valid key), 413 (the body is too large), 429 (the "
        "server is full: Retry-After).",
    },
    "5XX": {
        "model": ErrorResponse,
        "description": "500 (no member could go on with a forced call or JSON answer), 503 "
        "(a member or the feedback store cannot serve, or the server drains), 504 (the "
        "answer ran past its time).",
    },
}
"""The errors of a route under ``/v1/``, as the app's OpenAPI description gives them (in
place of FastAPI's 422, which the server never sends: a body that does not fit is a 400)."""


def bad_request(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, "invalid_request_error", param=param)


def api_error(error: Exception) -> APIError:
    """The HTTP answer to an error of the request or the ensemble."""
    if isinstance(error, APIError):
        return error
    if isinstance(error, PromptTooLongError):
        return APIError(400, str(error), "invalid_request_error", "context_length_exceeded")
    if isinstance(error, RequestError):
        return bad_request(str(error))
    if isinstance(error, FeedbackError):  # the feedback store stayed locked, or is gone
        return APIError(503, str(error), "service_unavailable", "feedback_store")
    if isinstance(error, AnswerFormatError):
        return APIError(500, str(error), "server_error", "answer_format")
    if isinstance(error, SpecEMError):  # a member cannot be loaded or reached
        return APIError(503, str(error), "service_unavailable", "member_unavailable")
    if isinstance(error, TimeoutError):  # the answer's own time (--answer-timeout)
        return APIError(504, str(error), "timeout", "timeout")
    if isinstance(error, ValidationError):  # a request setting out of its range
        return validation_error(error)
    if isinstance(error, (ValueError, TypeError)):
        return bad_request(str(error))
    return APIError(500, f"internal error: {type(error).__name__}: {error}", "server_error")


def http_error(error: HTTPException) -> APIError:
    """Starlette's and FastAPI's own errors (an unknown path, a method the path does not
    take, a body that cannot be read), in OpenAI's shape."""
    cause = error.__cause__
    if isinstance(cause, UnicodeDecodeError):  # FastAPI: "There was an error parsing the body"
        return bad_request(
            f"the body is not valid JSON: it is not UTF-8 text ({cause.reason} at byte "
            f"{cause.start})"
        )
    kind = "not_found_error" if error.status_code == 404 else "invalid_request_error"
    return APIError(error.status_code, str(error.detail), kind)


def validation_error(error: RequestValidationError | ValidationError) -> APIError:
    """A request body that does not fit the schema, or a setting it gives that does not
    fit the request's settings, named by its first bad field; a body that is not JSON
    says where it stops being JSON."""
    first = error.errors()[0]
    if first["type"] == "json_invalid":  # the location is a character's position
        at = first["loc"][-1]
        why = first.get("ctx", {}).get("error", first["msg"])
        return bad_request(f"the body is not valid JSON: {why} (at character {at})")
    where = ".".join(str(p) for p in first["loc"] if p != "body")
    return bad_request(f"{where or 'body'}: {first['msg']}", where or None)
