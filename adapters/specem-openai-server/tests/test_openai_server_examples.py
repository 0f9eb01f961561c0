"""The examples the server's guides include, against the running server."""

from __future__ import annotations

from openai_server_harness import serve


def test_openai_client_examples_talk_to_the_server(tiny_models, capsys):
    from openai_client import ask, langchain, stream

    with serve([str(tiny_models["llama"]), str(tiny_models["qwen2"])]) as base:
        assert ask(f"{base}/v1") and stream(f"{base}/v1") and langchain(f"{base}/v1")
    printed = capsys.readouterr().out
    assert "members: ['llama', 'qwen2']" in printed and "usage:" in printed
