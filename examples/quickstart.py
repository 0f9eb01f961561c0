"""The one-minute tour: ask, stream, and look at who wrote what.

./run python examples/quickstart.py
"""

from __future__ import annotations

from specem_chain import SpecEMChatModel


def main(max_tokens: int = 128) -> None:
    llm = SpecEMChatModel(seed=0, max_tokens=max_tokens)  # the embedded default ensemble

    message = llm.invoke("Explain speculative decoding in two sentences.")
    print(message.content)

    for chunk in llm.stream("Why is the sky blue?"):  # one chunk per accepted segment
        print(chunk.content, end="", flush=True)
    print()

    specem = message.response_metadata["specem"]
    for segment in specem["segments"]:
        print(f"{segment['member']:>30}: {segment['text']!r}")
    print("wins:", specem["wins"], "weights:", specem["weights"])


if __name__ == "__main__":
    main()
