"""`toolbridge run` (one question) and `toolbridge chat` (an interactive conversation)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.markup import escape

from bridge.cli._app import app
from bridge.cli._common import (
    EXIT_OK,
    FROM_FLAGS,
    AllowHostOpt,
    Connection,
    ToolsOpt,
    build_toolbox,
    exit_code_for,
    fail,
    with_platform_flags,
)
from bridge.errors import (
    AuthenticationError,
    BridgeError,
    ConfigurationError,
    UsageError,
    redact,
)

if TYPE_CHECKING:
    from bridge.bridge import Bridge
    from bridge.cli._render import Renderer
    from bridge.platforms.retry import RetryNotice
    from bridge.types import ToolCall, ToolChoice, ToolChoiceMode

__all__ = ["chat", "run"]

ConversationOpt = Annotated[
    str | None, typer.Option("--conversation-id", help="Continue this conversation.")
]
EndUserOpt = Annotated[str | None, typer.Option("--end-user-id", help="End user id sent along.")]
ToolChoiceOpt = Annotated[
    str | None,
    typer.Option(
        "--tool-choice", help="Force the agent to call this tool (or auto, none, required)."
    ),
]
ToolInputOpt = Annotated[
    str | None,
    typer.Option(
        "--tool-input",
        metavar="JSON",
        help="With --tool-choice: the arguments of the forced call, a JSON object (AppBuilder).",
    ),
]
StreamOpt = Annotated[
    bool, typer.Option("--stream/--no-stream", help="Stream the answer as it is written.")
]
YesOpt = Annotated[
    bool, typer.Option("--yes", "-y", help="Approve every call of a confirm-tool without asking.")
]
MaxRoundsOpt = Annotated[
    int, typer.Option("--max-rounds", min=1, help="Most tool rounds before giving up.")
]


NO_TOOLS = (
    "warning: no --tools given, so the agent has no local tools to call; add some with "
    "--tools tools.py (or a module, an HTTP manifest .yaml, openapi:..., mcp:...)"
)


def _make_bridge(
    *,
    tools: list[str],
    connection: Connection = FROM_FLAGS,
    end_user_id: str | None,
    tool_choice: str | None,
    stream: bool,
    max_rounds: int,
    renderer: Renderer | None,
    tool_input: str | None = None,
    yes: bool,
    allow_hosts: list[str],
) -> Bridge:
    from bridge.bridge import Bridge
    from bridge.types import ToolChoice

    if not tools:
        typer.echo(NO_TOOLS, err=True)
    toolbox = build_toolbox(tools, allow_hosts=allow_hosts)
    try:
        choice = _tool_choice(tool_choice, tool_input)
        if isinstance(choice, ToolChoice) and toolbox.get(choice.name) is None:
            raise UsageError(
                f"--tool-choice {choice.name!r} is not a loaded tool; "
                f"loaded: {', '.join(toolbox.names()) or '(none)'}"
            )
        adapter = connection.open(toolbox.manifests("openai") if connection.emulator else ())
    except BaseException:
        toolbox.close()  # MCP servers it started must not outlive the failed command
        raise
    return Bridge(
        adapter,
        toolbox,
        max_rounds=max_rounds,
        stream=stream,
        end_user_id=end_user_id,
        tool_choice=choice,
        approve=_approver(renderer, yes),
        on_event=renderer.handle if renderer is not None else None,
    )


def _tool_choice(name: str | None, tool_input: str | None) -> ToolChoice | ToolChoiceMode | None:
    """`--tool-choice` and `--tool-input` as one tool choice, or a `UsageError`."""
    from bridge.platforms.base import TOOL_CHOICE_MODES, parse_tool_choice
    from bridge.types import ToolChoice

    if tool_input is None:
        return parse_tool_choice(name, what="--tool-choice")
    if name is None:
        raise UsageError("--tool-input needs --tool-choice NAME: the tool those arguments are for")
    try:
        arguments = json.loads(tool_input)
    except ValueError as exc:
        raise UsageError(
            f"--tool-input is not valid JSON ({exc}); expected an object such as "
            '\'{"city": "Beijing"}\''
        ) from None
    if not isinstance(arguments, dict):
        raise UsageError(
            f"--tool-input must be a JSON object of the tool's arguments, got "
            f"{type(arguments).__name__}: {tool_input}"
        )
    choice = parse_tool_choice({"name": name, "input": arguments}, what="--tool-choice")
    if not isinstance(choice, ToolChoice) or name in TOOL_CHOICE_MODES:
        raise UsageError(f"--tool-input needs --tool-choice to name a tool, not the mode {name!r}")
    return choice


def _retry_line(renderer: Renderer | None) -> Callable[[RetryNotice], None]:
    """Say on stderr that the client backs off, so a slow platform does not look hung."""

    def show(notice: RetryNotice) -> None:
        if renderer is None:
            typer.echo(f"{notice}", err=True)
        else:
            renderer.retrying(str(notice))

    return show


def _approver(renderer: Renderer | None, yes: bool) -> Callable[[ToolCall], bool] | None:
    """Ask y/n before a confirm-tool runs; `--yes` approves all; --json mode has nobody to ask
    (None: the call is refused as "no approver is configured", not as a person's no)."""
    if renderer is None and not yes:
        return None

    def approve(call: ToolCall) -> bool:
        if yes or renderer is None:
            return True
        from bridge.cli._render import format_arguments

        renderer.close()
        try:
            return typer.confirm(
                f"Run {call.name}({format_arguments(call.arguments)})?", default=False, err=True
            )
        except (typer.Abort, EOFError):
            return False

    return approve


@app.command()
@with_platform_flags()
def run(
    query: Annotated[str, typer.Argument(help="The question for the agent.")],
    tools: ToolsOpt = [],  # noqa: B006 - typer needs a literal default
    connection: Connection = FROM_FLAGS,
    conversation_id: ConversationOpt = None,
    end_user_id: EndUserOpt = None,
    tool_choice: ToolChoiceOpt = None,
    tool_input: ToolInputOpt = None,
    stream: StreamOpt = True,
    max_rounds: MaxRoundsOpt = 10,
    yes: YesOpt = False,
    resume: Annotated[
        str | None,
        typer.Option(
            "--resume",
            metavar="INTERRUPT_ID",
            help="QUERY answers this human-input pause (needs --conversation-id).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    allow_host: AllowHostOpt = [],  # noqa: B006 - typer needs a literal default
) -> None:
    """Ask the agent one question, running the tools it calls, and print the answer.

    Exit codes: 0 finished; 1 run failed; 2 usage or configuration error;
    3 authentication refused; 4 network unreachable after retries.
    """
    from bridge.cli._render import Renderer, result_json

    renderer = None if as_json else Renderer()

    def failed(exc: BridgeError, rounds: int = 0, conversation: str | None = None) -> NoReturn:
        if not as_json:
            fail(exc)
        typer.echo(
            result_json(
                conversation_id=conversation,
                answer="",
                rounds=rounds,
                tool_runs=exc.tool_runs,
                request_ids=[rid for rid in [getattr(exc, "request_id", None)] if rid],
                error={
                    "type": type(exc).__name__,
                    "message": redact(str(exc)),
                    "exit_code": exit_code_for(exc),
                },
            )
        )
        raise typer.Exit(exit_code_for(exc)) from None

    if resume is not None and conversation_id is None:
        failed(UsageError("--resume needs the --conversation-id of the paused conversation"))
    try:
        bridge = _make_bridge(
            tools=tools,
            connection=replace(connection, on_retry=_retry_line(renderer)),
            end_user_id=end_user_id,
            tool_choice=tool_choice,
            tool_input=tool_input,
            stream=stream,
            max_rounds=max_rounds,
            renderer=renderer,
            yes=yes,
            allow_hosts=allow_host,
        )
    except BridgeError as exc:
        failed(exc)
    conversation = bridge.conversation(conversation_id)
    try:
        if renderer is not None:
            renderer.waiting()
        if resume is not None:
            result = conversation.resume(query, interrupt_id=resume)
        else:
            result = conversation.ask(query)
        # What a later `run --conversation-id` continues: the journal here lives in memory,
        # so the platform's own id (a platform whose first message opens the conversation
        # names it with a handle only this process could map).
        continued = conversation.platform_conversation_id
    except BridgeError as exc:
        if renderer is not None:
            renderer.close()
        failed(exc, conversation.last_rounds, conversation._platform_id or conversation._id)
    finally:
        conversation.close()
        bridge.close()
        bridge.toolbox.close()  # stops MCP servers, closes HTTP sessions
    if renderer is not None:
        renderer.close()
        if result.human_input is not None:
            # The question itself was printed as it arrived ("? the agent asks for input").
            renderer.err.print(
                "[yellow]Answer with[/yellow] toolbridge run ANSWER "
                f"--conversation-id {continued} "
                f"--resume {result.human_input.interrupt_id}",
                markup=True,
            )
    else:
        typer.echo(
            result_json(
                conversation_id=continued,
                answer=result.answer,
                rounds=result.rounds,
                tool_runs=result.tool_runs,
                request_ids=result.request_ids,
                human_input=(
                    {
                        "interrupt_id": result.human_input.interrupt_id,
                        "prompt": result.human_input.prompt,
                        "request_id": result.human_input.request_id,
                    }
                    if result.human_input is not None
                    else None
                ),
            )
        )
    raise typer.Exit(EXIT_OK)


@app.command()
@with_platform_flags()
def chat(
    tools: ToolsOpt = [],  # noqa: B006 - typer needs a literal default
    connection: Connection = FROM_FLAGS,
    conversation_id: ConversationOpt = None,
    end_user_id: EndUserOpt = None,
    stream: StreamOpt = True,
    max_rounds: MaxRoundsOpt = 10,
    yes: YesOpt = False,
    allow_host: AllowHostOpt = [],  # noqa: B006 - typer needs a literal default
) -> None:
    """Talk with the agent in one conversation; type /exit (or Ctrl-D) to leave."""
    from bridge.cli._render import Renderer

    renderer = Renderer()
    try:
        bridge = _make_bridge(
            tools=tools,
            connection=replace(connection, on_retry=_retry_line(renderer)),
            end_user_id=end_user_id,
            tool_choice=None,
            stream=stream,
            max_rounds=max_rounds,
            renderer=renderer,
            yes=yes,
            allow_hosts=allow_host,
        )
    except BridgeError as exc:
        fail(exc)
    conversation = bridge.conversation(conversation_id)
    try:
        while True:
            try:
                line = renderer.err.input("[bold cyan]you>[/bold cyan] ")
            except (EOFError, KeyboardInterrupt):
                renderer.err.print()
                break
            text = line.strip()
            if not text:
                continue
            if text in {"/exit", "/quit"}:
                break
            try:
                renderer.waiting()
                if conversation.pending_input is not None:
                    result = conversation.resume(text)
                else:
                    result = conversation.ask(text)
                renderer.close()
                if result.human_input is not None:
                    renderer.err.print("[yellow](answer the question above)[/yellow]")
            except (AuthenticationError, ConfigurationError) as exc:
                renderer.close()
                fail(exc)
            except BridgeError as exc:
                renderer.close()
                renderer.err.print(f"[red]error:[/red] {escape(redact(str(exc)))}", markup=True)
    finally:
        conversation.close()
        bridge.close()
        bridge.toolbox.close()  # stops MCP servers, closes HTTP sessions
    raise typer.Exit(EXIT_OK)
