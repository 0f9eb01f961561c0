"""The backend-agnostic ensemble loop, its round steps and its pure policy."""

from .config import EngineConfig, PolicyName
from .constraints import AnswerFormat
from .events import Candidate, FinishReason, RoundEvent, RoundTiming
from .loop import run_rounds
from .policy import Judgement, Verification
from .roster import Seat

__all__ = [
    "AnswerFormat",
    "Candidate",
    "EngineConfig",
    "FinishReason",
    "Judgement",
    "PolicyName",
    "RoundEvent",
    "RoundTiming",
    "Seat",
    "Verification",
    "run_rounds",
]
