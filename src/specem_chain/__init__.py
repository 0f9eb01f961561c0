"""specem-chain: ensemble LLMs by next-segment prediction (SpecEM)."""

from typing import TYPE_CHECKING

from .answer_formats import AnswerOptions
from .engine import EngineConfig
from .feedback import Feedback
from .members import Member, Sampling
from .report import report
from .request import Answer, Request, RequestSettings, Update, Usage, merge_call, open_request

if TYPE_CHECKING:
    from .chat_model import SpecEMChatModel

__all__ = [
    "Answer",
    "AnswerOptions",
    "EngineConfig",
    "Feedback",
    "Member",
    "Request",
    "RequestSettings",
    "Sampling",
    "SpecEMChatModel",
    "Update",
    "Usage",
    "merge_call",
    "open_request",
    "report",
]


def __getattr__(name: str) -> object:
    """``SpecEMChatModel`` is imported on first use: LangChain's import takes about two
    seconds, which the command line and the other front ends need not pay."""
    if name == "SpecEMChatModel":
        from .chat_model import SpecEMChatModel

        return SpecEMChatModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "SpecEMChatModel"})
