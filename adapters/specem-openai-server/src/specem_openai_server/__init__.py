"""An OpenAI-compatible HTTP server in front of :class:`~specem_chain.SpecEMChatModel`.

Needs the ``serve`` extra: ``pip install 'specem-chain[serve]'``.
"""

from .app import create_app

__all__ = ["create_app"]
