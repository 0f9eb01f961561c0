"""SpecEM ensembles of small LLMs as a Haystack chat generator."""

from .chat_generator import SpecEMChatGenerator

__all__ = ["SpecEMChatGenerator"]
