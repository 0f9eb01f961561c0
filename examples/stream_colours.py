"""Stream an answer to the terminal, each segment in the colour of the member that wrote it,
through a LangChain callback handler.

    ./run python examples/stream_colours.py
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from rich.console import Console
from rich.text import Text

from specem_chain import SpecEMChatModel

COLOURS = ("cyan", "magenta", "green", "yellow")


class MemberColours(BaseCallbackHandler):
    """Prints every accepted segment in its member's colour as it arrives."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(highlight=False)
        self.colours: dict[str, str] = {}

    def on_llm_new_token(self, token: str, *, chunk: Any = None, **kwargs: Any) -> None:
        segments = chunk.message.response_metadata.get("specem", {}).get("segments", [])
        if not segments:
            return
        member = segments[0]["member"]
        colour = self.colours.setdefault(member, COLOURS[len(self.colours) % len(COLOURS)])
        self.console.print(Text(token, style=colour), end="")

    def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        legend = Text("  ").join(Text(m, style=c) for m, c in self.colours.items())
        self.console.print()
        self.console.print(Text("members: ") + legend)


if __name__ == "__main__":
    llm = SpecEMChatModel(seed=0)
    question = "Explain in three sentences why the sky is blue."
    for _ in llm.stream(question, config={"callbacks": [MemberColours()]}):
        pass
