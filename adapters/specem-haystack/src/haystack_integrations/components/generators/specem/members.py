"""The generator's members: from specs, as plain data for ``to_dict``, and with their API
keys from Haystack secrets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from haystack.utils import Secret
from pydantic import SecretStr
from specem_chain import Member
from specem_chain.members import member_list
from specem_chain.models import DEFAULT_MEMBERS

MemberSpec = str | Member | Mapping[str, Any]


def to_members(members: MemberSpec | Sequence[MemberSpec] | None) -> list[Member]:
    """Members from specs (a built-in name, a folder, a ``.gguf``, ``tgi+URL``,
    ``openai+URL#model``), ``Member`` objects or their dumps; None: the default ensemble."""
    if isinstance(members, Mapping):
        members = dict(members)
    return member_list(DEFAULT_MEMBERS if members is None else members)


def member_data(member: Member) -> str | dict[str, Any]:
    """A member as its spec string when that is all it sets, else its non-default fields.
    An API key is never written: give it as a ``Secret`` in ``api_keys``."""
    if member.api_key is not None:
        raise ValueError(
            f"member {member.label!r} holds its api_key in plain text, which to_dict does not "
            f"write; give it as SpecEMChatGenerator(api_keys={{{member.label!r}: "
            "Secret.from_env_var('YOUR_KEY_VARIABLE')}) instead"
        )
    data = member.model_dump(mode="json", exclude_defaults=True)
    return member.source if data == {"source": member.source} else data


def check_api_keys(api_keys: Mapping[str, Secret], members: Sequence[Member]) -> None:
    """Each key names a remote member and each value is a Haystack ``Secret``."""
    remote = [m.label for m in members if m.remote]
    for label, secret in api_keys.items():
        if label not in remote:
            raise ValueError(
                f"api_keys names {label!r}, which is not a remote member; remote members: {remote}"
            )
        if not isinstance(secret, Secret):
            raise TypeError(
                f"api_keys[{label!r}] must be a haystack.utils.Secret, e.g. "
                "Secret.from_env_var('YOUR_KEY_VARIABLE'), not a plain value"
            )


def with_api_keys(members: Sequence[Member], api_keys: Mapping[str, Secret]) -> list[Member]:
    """The members, each remote one with its key resolved from its ``Secret``."""
    return [
        m.model_copy(update={"api_key": SecretStr(api_keys[m.label].resolve_value())})
        if m.label in api_keys
        else m
        for m in members
    ]
