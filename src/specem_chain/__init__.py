"""specem-chain: ensemble LLMs by next-segment prediction (SpecEM)."""

from .answer_formats import AnswerOptions
from .chat_model import SpecEMChatModel
from .engine import EngineConfig
from .feedback import Feedback
from .members import Member, Sampling
from .report import report
from .request import Answer, Request, RequestSettings, Update, Usage, merge_call, open_request

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
