"""An emulator's state in a file, so that a restarted emulator knows its conversations.

An emulator keeps its conversations in memory. `toolbridge serve --emulator` runs one inside the
daemon, whose journal survives a restart (``kill -9`` included): without this file, the
restarted emulator would answer "not found" for every conversation of that journal, and the
interrupted message could not deliver its outputs. With it (`Emulator(state_file=...)`), every
change is written before the answer that reveals it leaves the server (so a client never sees
a tool call the file does not hold), atomically (a temporary file renamed over the old one), and
read back when the emulator starts.

What is kept: the shared conversations (`EmulatorState`), and what each protocol keeps besides
(its `SAVED` attributes: Coze's chats and files, the Responses chain). The request log and the
fault counters are not. Strings are written with secrets masked (`bridge.errors.redact`), as in
the journal. A scenario rule a run follows is written as its position in the scenario: a file
written under another scenario whose rules moved is not used (the emulator starts empty and
says so; the daemon then continues those conversations in new platform conversations).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol

from pydantic import TypeAdapter, ValidationError

from bridge.emulator.planner import Planner
from bridge.emulator.state import Conversation, EmulatorState
from bridge.errors import redact

__all__ = ["FORMAT", "SavedApp", "StateFile"]

logger = logging.getLogger(__name__)

FORMAT = 1
"""The file's format version; a file of another version is not read."""

_CONVERSATIONS: TypeAdapter[dict[str, Conversation]] = TypeAdapter(dict[str, Conversation])


class SavedApp(Protocol):
    """A protocol app whose state can be kept in a file."""

    state: EmulatorState
    planner: Planner
    SAVED: ClassVar[Mapping[str, Any]]
    """Attributes kept besides the conversations, by name, with their types."""


class StateFile:
    """One emulator's state file: `load` it once at start, `save` after every change."""

    def __init__(self, path: str | Path, app: SavedApp) -> None:
        self.path = Path(path)
        self.app = app
        self._adapters = {name: TypeAdapter(kind) for name, kind in app.SAVED.items()}

    def _context(self) -> dict[str, Any]:
        scenario = self.app.planner.scenario
        return {"rules": list(scenario.rules) if scenario is not None else []}

    def load(self) -> bool:
        """Take the saved state back (True), or start empty (False) when there is no file or it
        cannot be used (logged with the reason)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return False
        except OSError as exc:
            logger.warning("emulator state %s unreadable (%s); starting empty", self.path, exc)
            return False
        try:
            data = json.loads(raw.decode("utf-8"))  # not UTF-8: a ValueError, left aside
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                raise ValueError(f"not an emulator state file of format {FORMAT}")
            context = self._context()
            conversations = _CONVERSATIONS.validate_python(
                data.get("conversations", {}), context=context
            )
            extras = {
                name: adapter.validate_python(data[name], context=context)
                for name, adapter in self._adapters.items()
                if name in data
            }
        except (ValueError, ValidationError) as exc:
            logger.warning(
                "emulator state %s cannot be used (%s); starting empty: its conversations "
                "continue in new ones",
                self.path,
                " ".join(str(exc).split())[:300],
            )
            return False
        state = self.app.state
        with state.lock:
            state.restore_conversations(conversations)
            for name, value in extras.items():
                setattr(self.app, name, value)
        logger.info(
            "emulator state taken back from %s (%d conversation(s))", self.path, len(conversations)
        )
        return True

    def save(self) -> None:
        """Write the state now, atomically; a failure is logged, never raised (the emulator
        goes on serving)."""
        context = self._context()
        state = self.app.state
        try:
            with state.lock:
                data: dict[str, Any] = {
                    "format": FORMAT,
                    "conversations": _CONVERSATIONS.dump_python(
                        state.conversations_by_id(), mode="json", context=context
                    ),
                }
                for name, adapter in self._adapters.items():
                    data[name] = adapter.dump_python(
                        getattr(self.app, name), mode="json", context=context
                    )
            text = json.dumps(_redacted(data), ensure_ascii=False, separators=(",", ":"))
            _write_atomically(self.path, text)
        except (OSError, ValueError) as exc:
            logger.warning("emulator state %s not written: %s", self.path, exc)


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: _redacted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_redacted(item) for item in value]
    return value


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
