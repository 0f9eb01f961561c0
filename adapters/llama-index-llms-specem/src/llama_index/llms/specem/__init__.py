"""The specem-chain ensemble (SpecEM) as a LlamaIndex LLM."""

from llama_index.llms.specem.base import SpecEM

__all__ = ["SpecEM"]
