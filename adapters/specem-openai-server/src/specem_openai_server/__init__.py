"""``specem serve``: a SpecEM ensemble behind the OpenAI chat-completions API.

``uvicorn.run(create_app(members, settings))`` serves it from Python. The web stack is
imported when ``create_app`` is first asked for, so that ``specem``, which finds this
package's command at start-up, starts as fast without it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
