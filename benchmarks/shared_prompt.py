"""How long a request takes when its prompt starts as the one before it did: a product
sheet as the system prompt, then three questions about it, one after another.

    ./run python benchmarks/shared_prompt.py [-m MEMBER ...] [--max-tokens 10]

Without ``-m`` it measures the embedded default. Prints a markdown row per question: the
seconds to the answer, the prompt's tokens and the answer's start. On llama.cpp, the later
requests keep the whole 64-token chunks of the sheet that the first one read, and read the
rest (Guides -> Local members).
"""

from __future__ import annotations

import argparse
import time

from langchain_core.messages import HumanMessage, SystemMessage

from specem_chain import SpecEMChatModel

SHEET = "Answer from this product sheet only.\n" + " ".join(
    f"Section {i}: the Zephyr-{i} kettle holds {i % 3 + 1}.5 litres, boils in {i % 4 + 2} "
    f"minutes and has a {i % 5 + 1}-year warranty."
    for i in range(1, 19)
)
QUESTIONS = [
    "How long is the warranty on the Zephyr-9 kettle?",
    "How many litres does the Zephyr-4 hold?",
    "How long is the warranty on the Zephyr-9 kettle?",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-m", "--member", action="append", default=[], dest="members")
    parser.add_argument("--max-tokens", type=int, default=10)
    args = parser.parse_args()
    members = {"members": args.members} if args.members else {}
    llm = SpecEMChatModel(seed=0, max_tokens=args.max_tokens, **members)
    print("| request | question | seconds | prompt tokens | answer starts |")
    print("|---|---|---|---|---|")
    for n, question in enumerate(QUESTIONS, 1):
        start = time.perf_counter()
        reply = llm.invoke([SystemMessage(SHEET), HumanMessage(question)])
        seconds = time.perf_counter() - start
        prompt = reply.usage_metadata["input_tokens"]
        print(f"| {n} | {question} | {seconds:.1f} | {prompt} | {reply.content[:30]!r} |")


if __name__ == "__main__":
    main()
