"""Run the emulator in-process, on loopback, for tests and demos.

with Emulator(scenario="weather.yaml") as emu:
    os.environ["GATEWAY_URL_V2"] = emu.base_url      # what the official SDK reads
    client = AppBuilderClient(app_id=emu.app_id, token=emu.token, base_url=emu.base_url)
    ...
    assert emu.conversation(conversation_id).pending_call_ids == ()
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from bridge._serve import serve_in_thread
from bridge.emulator.faults import ENV_VAR, FaultSpec
from bridge.emulator.protocols import ProtocolApp, get_protocol
from bridge.emulator.saving import StateFile
from bridge.emulator.scenario import Scenario
from bridge.emulator.state import ConversationSnapshot, EmulatorState, RecordedRequest
from bridge.errors import UsageError

__all__ = ["Emulator"]


class Emulator:
    """An agent platform's server (AppBuilder by default) running in a background thread.

    Args:
        token: the token clients must send (``Authorization: Bearer <token>``).
        app_id: the one app id served.
        scenario: a scenario file path, mapping or `Scenario`; None for the default planner.
        host: where to listen; loopback by default.
        port: 0 picks a free ephemeral port (see `port` and `base_url` once started).
        faults: a fault spec for every matching request; None reads
            ``TOOLBRIDGE_EMULATOR_FAULTS`` (unset means no faults), ``""`` means none.
        protocol: the wire protocol spoken (`bridge.emulator.protocols.PROTOCOLS`):
            ``appbuilder`` by default; the same scenario drives every protocol.
        state_file: keep the conversations in this file (`bridge.emulator.saving`): read when
            the emulator is made, written before each answer, so another emulator made on the
            same file (after a restart, even a ``kill -9``) knows them. None keeps them in
            memory only.

    Raises:
        ScenarioError: the scenario cannot be loaded (raised by the constructor).
        FaultSpecError: the fault spec cannot be parsed (raised by the constructor).
        UsageError: unknown protocol.
    """

    def __init__(
        self,
        *,
        token: str = "emulator-token",
        app_id: str = "emulator-app",
        scenario: str | Path | Mapping[str, Any] | Scenario | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        faults: str | FaultSpec | None = None,
        protocol: str = "appbuilder",
        state_file: str | Path | None = None,
    ) -> None:
        if faults is None:
            faults = os.environ.get(ENV_VAR, "")
        self.protocol = get_protocol(protocol)
        self.app: ProtocolApp = self.protocol.create_app(
            token=token, app_id=app_id, scenario=scenario, faults=faults
        )
        self.state_file = Path(state_file) if state_file is not None else None
        if self.state_file is not None:
            saved = StateFile(self.state_file, self.app)
            saved.load()
            self.app.state.on_change = saved.save
        self.token = token
        self.app_id = app_id
        self.host = host
        self._requested_port = port
        self.port: int | None = None
        self._stack: contextlib.ExitStack | None = None

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> Emulator:
        """Start serving; returns self. Starting twice is a `UsageError`."""
        if self._stack is not None:
            raise UsageError("this Emulator is already running")
        stack = contextlib.ExitStack()
        handle = stack.enter_context(
            serve_in_thread(self.app, host=self.host, port=self._requested_port)
        )
        self._stack = stack
        self.port = handle.port
        return self

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """Whether the server is up."""
        return self._stack is not None

    @property
    def base_url(self) -> str:
        """The gateway URL, ``http://HOST:PORT``; clients append ``/v2/app/...``."""
        if self.port is None:
            raise UsageError("the Emulator has not been started; use `with Emulator() as emu:`")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def env(self) -> dict[str, str]:
        """The environment variables that point a client (or the official SDK) here."""
        return self.protocol.client_env(self.base_url, self.token, self.app_id)

    def configure(self, sections: Mapping[str, Any]) -> None:
        """Give the emulated agent configuration that a platform keeps server-side, as
        scenario sections (a Coze bot's plugins: ``{"coze": {"plugins": [...]}}``); a section
        the scenario it started with declares wins. Protocols without such configuration
        ignore it.

        Raises:
            ScenarioError: a section breaks its format.
        """
        configure = getattr(self.app, "configure", None)
        if configure is not None:
            configure(sections)

    # --- inspection -------------------------------------------------------------------------

    @property
    def state(self) -> EmulatorState:
        """The live server state (conversations, request log, fault counters)."""
        return self.app.state

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first (Authorization masked)."""
        return self.app.state.requests()

    def clear_requests(self) -> None:
        """Forget the recorded requests and reset `times=` fault counters."""
        self.app.state.clear_requests()

    def conversation(self, conversation_id: str) -> ConversationSnapshot:
        """A frozen copy of one conversation (pending calls, messages, files, feedback).

        Raises:
            KeyError: unknown conversation id.
        """
        return self.app.state.snapshot(conversation_id)

    def conversation_ids(self) -> list[str]:
        """Ids of every conversation created so far."""
        return self.app.state.conversation_ids()

    def __repr__(self) -> str:
        where = f"{self.host}:{self.port}" if self.port else "not started"
        return f"Emulator({self.protocol.name}, app_id={self.app_id!r}, {where})"
