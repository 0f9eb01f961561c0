"""specem-chain: ensemble LLMs by next-segment prediction (SpecEM)."""

from .chat_model import SpecEMChatModel
from .engine import EngineConfig
from .feedback import Feedback
from .members import Member, Sampling
from .report import report
from .request import Answer, Request, RequestSettings, Update, open_request

__all__ = [
    "Answer",
    "EngineConfig",
    "Feedback",
    "Member",
    "Request",
    "RequestSettings",
    "Sampling",
    "SpecEMChatModel",
    "Update",
    "open_request",
    "report",
]
