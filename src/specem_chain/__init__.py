"""specem-chain: ensemble LLMs by next-segment prediction (SpecEM)."""

from .chat_model import SpecEMChatModel
from .engine import EngineConfig
from .members import Member, Sampling
from .report import report

__all__ = ["EngineConfig", "Member", "Sampling", "SpecEMChatModel", "report"]
