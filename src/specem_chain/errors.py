"""Errors the package raises on purpose. Each message names the problem and the fix."""


class SpecEMError(Exception):
    """Base class of every error specem-chain raises on purpose."""


class MemberSpecError(SpecEMError, ValueError):
    """A member spec names no model that can be loaded."""


class PromptTooLongError(SpecEMError, ValueError):
    """The conversation does not fit a member's context window."""


class EnsembleError(SpecEMError):
    """The ensemble cannot go on with this request."""
