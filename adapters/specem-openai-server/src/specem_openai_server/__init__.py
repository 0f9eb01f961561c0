"""``specem serve``: a SpecEM ensemble behind the OpenAI chat-completions API.

``uvicorn.run(create_app(members, settings))`` serves it from Python.
"""

from .app import create_app

__all__ = ["create_app"]
