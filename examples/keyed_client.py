"""Use a `specem serve` that needs a key: each client takes it as `api_key`.

OPENAI_API_KEY=... ./run python examples/keyed_client.py https://specem.example.com/v1
"""

from __future__ import annotations

import os
import sys

from langchain_openai import ChatOpenAI
from openai import OpenAI


def ask(base_url: str, key: str) -> str:
    client = OpenAI(base_url=base_url, api_key=key)  # sent as Authorization: Bearer KEY
    completion = client.chat.completions.create(
        model="specem",
        messages=[{"role": "user", "content": "What is 12 times 3?"}],
        max_tokens=64,
    )
    return completion.choices[0].message.content


def ask_langchain(base_url: str, key: str) -> str:
    llm = ChatOpenAI(base_url=base_url, api_key=key, model="specem", max_tokens=64)
    return llm.invoke("Say hello in French.").content


if __name__ == "__main__":
    url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000/v1"
    key = os.environ["OPENAI_API_KEY"]  # where OpenAI clients look for a key
    print(ask(url, key))
    print(ask_langchain(url, key))
