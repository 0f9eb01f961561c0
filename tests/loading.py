"""The real members the default test run uses, and loading a member's backend as a request
does (built-in names resolved first).

The default run loads only two built-in models: SmolLM2 (135M), on both in-process
backends, and the default member on llama.cpp. Every other built-in, and the default member
in float32 on transformers, are for the heavy checks (``pytest -m heavy``).
"""

from __future__ import annotations

from typing import Any

import pytest

from specem_chain.backends import loaded_backend
from specem_chain.members import Member
from specem_chain.models import BUILTINS, DEFAULT_MEMBERS, resolve

DEFAULT_MODEL = DEFAULT_MEMBERS[0].source
"""The default member's built-in model (Qwen2.5-Coder 1.5B)."""
SMOLLM2 = Member(source="smollm2", backend="llamacpp")
"""SmolLM2 (135M) on llama.cpp: the cheapest real member, for flows that need a real model
writing valid calls and objects (it drafts under the answer's format), not a strong one."""
LARGER = Member(source=DEFAULT_MODEL, backend="llamacpp", name="larger")
"""The default member's model drafting as any member does: the larger of the two real
models, for ensembles of two different models."""


def every_builtin() -> list[Any]:
    """Every built-in model as a test parameter: SmolLM2 in the default run, the others
    among the heavy checks."""
    return [
        pytest.param(name, marks=() if name == "smollm2-135m-instruct" else pytest.mark.heavy)
        for name in BUILTINS
    ]


def seeds(default: int, every: int) -> list[Any]:
    """Seeds 0..every-1 as test parameters: the first ``default`` in the default run, the
    rest among the heavy checks."""
    return [
        pytest.param(seed, marks=() if seed < default else pytest.mark.heavy)
        for seed in range(every)
    ]


def loaded(member: Member) -> Any:
    """The member's shared, loaded backend."""
    return loaded_backend(resolve(member, progress=False))
