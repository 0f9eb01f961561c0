"""Use a running `specem serve` from the official openai client and from ChatOpenAI.

./run specem serve --port 8000 &
./run python examples/openai_client.py http://127.0.0.1:8000/v1
"""

from __future__ import annotations

import sys

from langchain_openai import ChatOpenAI
from openai import OpenAI


def ask(base_url: str) -> str:
    client = OpenAI(base_url=base_url, api_key="unused")  # the server needs no key
    completion = client.chat.completions.create(
        model="specem",  # any name: the server serves one ensemble
        messages=[{"role": "user", "content": "What is 12 times 3?"}],
        max_tokens=64,
        seed=0,
    )
    provenance = completion.model_extra["specem"]  # the extension field
    print("members:", list(provenance["wins"]), "wins:", list(provenance["wins"].values()))
    return completion.choices[0].message.content


def stream(base_url: str) -> str:
    client = OpenAI(base_url=base_url, api_key="unused")
    chunks = client.chat.completions.create(
        model="specem",
        messages=[{"role": "user", "content": "Name three primary colours."}],
        max_tokens=64,
        stream=True,
        stream_options={"include_usage": True},
    )
    text = ""
    for chunk in chunks:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if chunk.usage:  # the last chunk, since include_usage is set
            print("usage:", chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
    return text


def langchain(base_url: str) -> str:
    llm = ChatOpenAI(base_url=base_url, api_key="unused", model="specem", max_tokens=64)
    return llm.invoke("Say hello in French.").content


if __name__ == "__main__":
    url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000/v1"
    print(ask(url))
    print(stream(url))
    print(langchain(url))
