"""The daemon's door, policy and audit record, made from its settings: the one place the daemon
turns its flags into `bridge.access` objects.

    open_door(settings)        `Door.open` over --callers, --api-key, --api-key-file and the
                               identity provider's flags (every request is `ANONYMOUS`, with
                               every permission, when none is given)
    load_policy(settings)      --policy FILE.cedar (None: every call allowed)
    open_audit(settings, j)    the audit record, in the daemon's own journal, kept whenever the
                               daemon knows callers or has a policy

Legacy keys (``--api-key``, ``--api-key-file``) are callers with every permission and every
tool. A callers file and a key file may be given together (their names and keys must differ).
SIGHUP reloads the callers (`Door.reload`); a broken file keeps the callers in use.
"""

from __future__ import annotations

from typing import Any

from bridge.access import ANONYMOUS, Decides, Principal, Records
from bridge.access.door import Door
from bridge.daemon.settings import DaemonSettings
from bridge.journal.base import Journal

__all__ = [
    "door_principal",
    "load_policy",
    "open_audit",
    "open_door",
    "requires_credentials",
]


def open_door(settings: DaemonSettings) -> Door:
    """The door `settings` configure.

    Raises:
        ConfigurationError: a callers or key file that cannot be read or has bad entries, or
            an identity provider's issuer without its audience.
    """
    return Door.open(
        callers_path=settings.callers,
        api_key=settings.api_key.get_secret_value() if settings.api_key is not None else None,
        api_key_file=settings.api_key_file,
        oidc_issuer=settings.oidc_issuer,
        oidc_audience=settings.oidc_audience,
        oidc_caller_claim=settings.oidc_caller_claim,
        oidc_roles_claim=settings.oidc_roles_claim,
    )


def load_policy(settings: DaemonSettings) -> Decides | None:
    """The ``--policy`` file's policy (None without one).

    Raises:
        ConfigurationError: the file cannot be read or is not Cedar policies.
    """
    if settings.policy is None:
        return None
    from bridge.access.policy import Policy

    return Policy.from_file(settings.policy)


def open_audit(settings: DaemonSettings, journal: Journal) -> Records | None:
    """The audit record the daemon appends to: in its journal (its replica's chain), kept when
    the daemon knows callers or has a policy (None otherwise: a loopback daemon without
    credentials records nothing, as before)."""
    if not settings.authenticates and settings.policy is None:
        return None
    from bridge.access.audit import AuditLog

    return AuditLog(journal)


def door_principal(door: Door, name: str | None) -> Principal | None:
    """The caller named `name` as the door knows it now (None: it knows none so named)."""
    if name is None:
        return None
    if door.anonymous:
        return ANONYMOUS
    callers: Any = door.callers
    found = callers.get(name) if callers is not None else None
    return found if isinstance(found, Principal) else None


def requires_credentials(door: Door) -> bool:
    """Whether the door refuses requests without credentials."""
    return not door.anonymous
