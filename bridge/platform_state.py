"""Platform state (contract b in `bridge.platforms.base`), between a platform and the journal.

An adapter that keeps a conversation's state in this process (Chat Completions' messages)
exports it after each platform round, and the journal keeps the latest: with the batch it has
pending (one transaction with "received"), and when a run ends or pauses for a person. Before a
conversation is used, a journaled state that this bridge did not write (a restart, another
process on the same journal) is imported. Each state is signed by its writer, the
`Bridge.state_writer` of the bridge that journaled it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from bridge.errors import UsageError
from bridge.journal.base import Journal
from bridge.journal.records import StateSnapshot
from bridge.platforms.base import (
    Platform,
    export_state_json,
    exports_state,
    import_state_into,
    knows_conversation,
)

__all__ = ["restore_state", "snapshot"]

logger = logging.getLogger(__name__)


def restore_state(
    platform: Platform,
    journal: Journal,
    conversation_id: str,
    platform_conversation_id: Callable[[], str],
    *,
    writer: str,
) -> None:
    """Give the platform its journaled state of the platform conversation, unless `writer`
    (this bridge) wrote it and the platform still holds it.

    `platform_conversation_id` is asked only when the platform exports state at all."""
    if not exports_state(platform):
        return
    platform_id = platform_conversation_id()
    record = journal.platform_state(conversation_id, platform_id)
    if record is None:
        return
    if record.writer == writer and knows_conversation(platform, platform_id):
        return
    if record.platform != platform.name:
        logger.warning(
            "conversation %s: the journaled state of %s is for the %s platform, not %s; "
            "it is not used",
            conversation_id,
            platform_id,
            record.platform,
            platform.name,
        )
        return
    try:
        import_state_into(platform, platform_id, record.state)
    except UsageError as exc:
        # As if the state were lost: the conversation goes on in a new platform
        # conversation (`Conversation._on_platform`), the journal keeps the history.
        logger.warning(
            "conversation %s: the %s platform refused the journaled state of %s: %s",
            conversation_id,
            platform.name,
            platform_id,
            exc,
        )
        return
    logger.info(
        "conversation %s: platform state of %s restored from the journal (written %s)",
        conversation_id,
        platform_id,
        record.updated_at.isoformat(),
    )


def snapshot(platform: Platform, platform_id: str, *, writer: str) -> StateSnapshot | None:
    """The platform's state of the platform conversation now, to journal (None: none)."""
    text = export_state_json(platform, platform_id)
    if text is None:
        return None
    return StateSnapshot.from_json(
        text, platform_conversation_id=platform_id, platform=platform.name, writer=writer
    )
