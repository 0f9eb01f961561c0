"""Where members run: one protocol and one registry of backends (:mod:`.registry`), one chat
template for every kind (:mod:`.template`), in-process models (transformers, llama.cpp) and
servers (TGI, OpenAI-style completions)."""

from .registry import (
    Backend,
    backend_for,
    forget_prompts,
    loaded_backend,
    open_session,
    release,
)

__all__ = [
    "Backend",
    "backend_for",
    "forget_prompts",
    "loaded_backend",
    "open_session",
    "release",
]
