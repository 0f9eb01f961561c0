"""Errors the package raises on purpose. Each message names the problem and the fix."""


class SpecEMError(Exception):
    """Base class of every error specem-chain raises on purpose."""


class MemberSpecError(SpecEMError, ValueError):
    """A member spec names no model that can be loaded."""


class PromptTooLongError(SpecEMError, ValueError):
    """The conversation does not fit a member's context window."""


class RequestError(SpecEMError, ValueError):
    """A request's input is wrong (no members, no conversation, a setting that cannot
    apply); it is refused before any member runs."""


class UnknownArgumentError(RequestError, TypeError):
    """A call gave an argument that is neither a request setting nor an answer option (a
    TypeError, as an unexpected keyword argument is, and a ValueError, as bad input is)."""


class FeedbackError(SpecEMError, ValueError):
    """A feedback store cannot be opened or used: its folder is missing, it is not a
    feedback store, or it stayed locked past the busy timeout."""


class EnsembleError(SpecEMError):
    """The ensemble cannot go on with this request."""


class AnswerFormatError(EnsembleError):
    """No member could continue the answer in its required format (a forced tool call or a
    JSON object), even after redrafting."""


class MemberUnavailable(EnsembleError):
    """A remote member kept failing (connection errors, 5xx, timeouts) after its retries.

    The engine drops such a member for the rest of the request and goes on with the others.
    """

    def __init__(self, member: str, reason: str) -> None:
        super().__init__(f"member {member!r} is unavailable: {reason}")
        self.member = member
        self.reason = reason


class MemberServerError(EnsembleError):
    """A member's server is misconfigured or refused a request: wrong kind of server, a
    missing capability, or a request it rejects. Retrying does not help."""
