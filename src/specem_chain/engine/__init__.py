"""The backend-agnostic ensemble loop and its pure policy."""

from .config import EngineConfig
from .loop import Candidate, FinishReason, RoundEvent, RoundTiming, Seat, run_rounds

__all__ = [
    "Candidate",
    "EngineConfig",
    "FinishReason",
    "RoundEvent",
    "RoundTiming",
    "Seat",
    "run_rounds",
]
