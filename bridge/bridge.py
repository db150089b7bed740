"""`Bridge`: a platform, a toolbox (in a `Dispatcher`), a journal and one `BridgeOptions`;
it makes the `Conversation`s (`bridge.conversation`, the loop) that run on them."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

from typing_extensions import Unpack

from bridge.access.principal import Principal
from bridge.conversation import Conversation, Result
from bridge.errors import UsageError
from bridge.journal.base import Journal
from bridge.options import (
    DISPATCHER_FIELDS,
    OPTION_FIELDS,
    ApproveHook,
    BridgeOptions,
    BridgeSettings,
)
from bridge.platforms.base import (
    Platform,
    declare_tools_to,
    parse_tool_choice,
    platform_tools_for,
    use_tracing,
)
from bridge.tools.approval import DeferredApprover
from bridge.tools.dispatch import Dispatcher
from bridge.tools.schema import to_dialect
from bridge.tools.toolbox import Toolbox
from bridge.tracing import Tracing
from bridge.types import Event, ToolCall, ToolChoice, ToolChoiceMode, ToolRun

__all__ = ["Bridge"]


class Bridge:
    """Connects a platform to a toolbox and keeps conversations going until they finish.

    A bridge is a platform, a `Dispatcher` (which holds the toolbox), a journal and one frozen
    `BridgeOptions`. `Bridge(platform, tools, max_rounds=3, ...)` is the short form: the
    keyword arguments are `BridgeOptions`' fields and the options of the `Dispatcher` built
    for `tools` (`max_concurrency`, `default_timeout`, `errors`, `max_output_chars`).

    Args:
        platform: the agent platform adapter (e.g. `AppBuilderPlatform`).
        tools: a `Toolbox`, a list of what `Toolbox.add` accepts (functions, modules, paths,
            toolkits...), or one such object. Not with `dispatcher`.
        options: how conversations run (`BridgeOptions`); not together with its fields as
            keyword arguments.
        dispatcher: a ready `Dispatcher` (its toolbox is used); otherwise one is built.
        journal: where conversations, messages and tool-call states are written before each
            step; None keeps them in memory (`MemoryJournal`). Pass a `SQLiteJournal` to
            survive crashes.
        **settings: `BridgeOptions` fields, and `Dispatcher` options (see `BridgeSettings`).

    Raises:
        UsageError: an option is out of range, `tool_choice` names no loaded tool, the platform
            does not offer a platform tool, or an option is given twice.
    """

    def __init__(
        self,
        platform: Platform,
        tools: Toolbox | Iterable[Any] | Any = None,
        *,
        options: BridgeOptions | None = None,
        dispatcher: Dispatcher | None = None,
        journal: Journal | None = None,
        **settings: Unpack[BridgeSettings],
    ) -> None:
        unknown = sorted(set(settings) - {*OPTION_FIELDS, *DISPATCHER_FIELDS})
        if unknown:
            raise TypeError(f"Bridge() got unexpected keyword arguments: {', '.join(unknown)}")
        given: dict[str, Any] = {k: v for k, v in settings.items() if k in OPTION_FIELDS}
        if options is None:
            options = BridgeOptions(**given)
        elif given:
            raise UsageError(
                f"pass either options= or its fields ({', '.join(sorted(given))}) as keyword "
                "arguments, not both"
            )
        elif not isinstance(options, BridgeOptions):
            raise UsageError(f"options must be a BridgeOptions, got {type(options).__name__}")
        self.platform = platform
        self._owned: list[Callable[[], None]] = []
        """What `close` releases: only what this bridge made (a given toolbox is the caller's)."""
        if dispatcher is not None:
            self.toolbox = dispatcher.toolbox
            self.dispatcher = dispatcher
        else:
            self.toolbox = _as_toolbox(tools)
            if self.toolbox is not tools:
                self._owned.append(self.toolbox.close)  # e.g. MCP server processes
            built: dict[str, Any] = {k: v for k, v in settings.items() if k in DISPATCHER_FIELDS}
            try:
                self.dispatcher = Dispatcher(
                    self.toolbox, tracer_provider=options.tracer_provider, **built
                )
            except BaseException:
                self._release()
                raise
            self._owned.append(self.dispatcher.close)
        try:
            self.platform_tools = platform_tools_for(platform, options.platform_tools)
            options = options.replace(tool_choice=self.checked_tool_choice(options.tool_choice))
            # An emulated agent whose tools are configured server-side learns them here.
            declare_tools_to(platform, self.toolbox.manifests("openai"))
        except BaseException:
            # What it made (a toolbox's MCP servers) must not leak; the platform is the caller's.
            self._release()
            raise
        self.options = options
        self.tracing = Tracing(options.tracer_provider)
        """Where its spans go: the runs' and the tool calls' (`bridge.tracing`)."""
        if options.tracer_provider is not None:
            # The client spans of the platform's requests and of the HTTP tools' requests go
            # where their parents (the runs and the tool calls) go; by default all use the
            # global provider, so nothing needs handing on.
            use_tracing(platform, self.tracing)
            self.toolbox.use_tracing(self.tracing)
        if journal is None:
            from bridge.journal.memory import MemoryJournal

            journal = MemoryJournal()
        self.journal: Journal = journal
        self.state_writer = uuid.uuid4().hex
        """Signs the platform states this bridge journals: a state signed by another (a
        process before a restart, a second daemon) is imported before the conversation goes on."""

    # Read-only views of `options`, as before it existed (another value: a new Bridge).

    @property
    def max_rounds(self) -> int:
        return self.options.max_rounds

    @property
    def stream(self) -> bool:
        return self.options.stream

    @property
    def end_user_id(self) -> str | None:
        return self.options.end_user_id

    @property
    def tool_choice(self) -> ToolChoice | ToolChoiceMode | None:
        return self.options.tool_choice

    @property
    def approve(self) -> ApproveHook | DeferredApprover | None:
        return self.options.approve

    @property
    def on_event(self) -> Callable[[Event], None] | None:
        return self.options.on_event

    @property
    def on_tool_call(self) -> Callable[[ToolCall], None] | None:
        return self.options.on_tool_call

    @property
    def on_tool_result(self) -> Callable[[ToolRun], None] | None:
        return self.options.on_tool_result

    @property
    def keep_events(self) -> bool:
        return self.options.keep_events

    def checked_tool_choice(self, value: object) -> ToolChoice | ToolChoiceMode | None:
        """`value` as a neutral tool choice naming a loaded tool, or a `UsageError`."""
        choice = parse_tool_choice(value)
        if isinstance(choice, ToolChoice) and self.toolbox.get(choice.name) is None:
            loaded = ", ".join(self.toolbox.names()) or "(none)"
            raise UsageError(
                f"tool_choice {choice.name!r} is not a loaded tool; loaded tools: {loaded}"
            )
        return choice

    def manifests(self, caller: Principal | None = None) -> list[dict[str, Any]]:
        """What goes out as `tools`: the local tools' manifests (only those `caller` may run,
        when given), then the platform's own."""
        dialect = self.platform.dialect
        if caller is None or caller.tools.everything:
            return [*self.toolbox.manifests(dialect), *self.platform_tools]
        mine = [to_dialect(s, dialect) for s in self.toolbox if caller.may_run(s.name, s.source)]
        return [*mine, *self.platform_tools]

    def conversation(
        self, id: str | None = None, *, end_user_id: str | None = None
    ) -> Conversation:
        """A conversation to ask several questions in; `id` continues an existing one."""
        return Conversation(self, id, end_user_id=end_user_id or self.options.end_user_id)

    def ask(self, query: str, **options: Any) -> Result:
        """Ask one question in a new conversation and return its finished result."""
        with self.conversation(end_user_id=options.pop("end_user_id", None)) as conv:
            return conv.ask(query, **options)

    def close(self) -> None:
        """Release the platform's connections, and the dispatcher and toolbox it made."""
        self.platform.close()
        self._release()

    def _release(self) -> None:
        owned, self._owned = self._owned, []
        for release in reversed(owned):
            release()

    def __enter__(self) -> Bridge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _as_toolbox(tools: Toolbox | Iterable[Any] | Any) -> Toolbox:
    """A toolbox from a toolbox, a list of tool objects, or one tool object (e.g. a module)."""
    if isinstance(tools, Toolbox):
        return tools
    if tools is None:
        return Toolbox()
    if isinstance(tools, list | tuple | set | frozenset):
        return Toolbox(tools)
    return Toolbox([tools])
