"""The Deploying guide's client example, against a server that needs a key."""

from __future__ import annotations

import openai
import pytest
from openai_server_harness import serve
from specem_chain import RequestSettings

from specem_openai_server.keys import ApiKeys

KEY = "sk-specem-example-5d1c0a"


def test_the_keyed_client_example_answers_with_the_key_and_not_without(tiny_models):
    from keyed_client import ask, ask_langchain

    members = [str(tiny_models["llama"]), str(tiny_models["qwen2"])]
    settings = RequestSettings(max_tokens=8)
    with serve(members, settings, keys=ApiKeys([KEY])) as base:
        assert ask(f"{base}/v1", KEY) and ask_langchain(f"{base}/v1", KEY)
        for wrong in (ask, ask_langchain):
            with pytest.raises(openai.AuthenticationError):
                wrong(f"{base}/v1", KEY + "x")
