"""The backend-agnostic ensemble loop and its pure policy."""

from .config import EngineConfig
from .constraints import AnswerFormat
from .loop import Candidate, FinishReason, RoundEvent, RoundTiming, Seat, run_rounds

__all__ = [
    "AnswerFormat",
    "Candidate",
    "EngineConfig",
    "FinishReason",
    "RoundEvent",
    "RoundTiming",
    "Seat",
    "run_rounds",
]
