"""`toolbridge call SPEC TOOL [ARGS_JSON]`: run one tool locally, the way the agent would."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from bridge.cli._app import app, state
from bridge.cli._common import EXIT_FAILED, EXIT_USAGE, AllowHostOpt, fail

if TYPE_CHECKING:
    from bridge.access import Principal
    from bridge.tools.approval import Approver
    from bridge.types import ToolCall

__all__ = ["call"]

_JSON_KINDS = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


def _parse_arguments(text: str) -> dict[str, Any]:
    from bridge.errors import UsageError

    if text == "-":
        text = typer.get_text_stream("stdin").read()
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"ARGS_JSON is not valid JSON ({exc}); expected an object such as "
            '\'{"city": "Paris"}\''
        ) from None
    if not isinstance(value, dict):
        kind = _JSON_KINDS.get(type(value), type(value).__name__)
        raise UsageError(
            f'ARGS_JSON must be a JSON object such as \'{{"city": "Paris"}}\', got a JSON {kind}'
        )
    return value


class _Traceback(logging.Filter):
    """Notes whether the dispatcher logged a traceback (a bug's, not a `ToolError`'s: an
    HTTP tool's 404 is an expected outcome) and, without --verbose, keeps its records quiet."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = False

    def filter(self, record: logging.LogRecord) -> bool:
        self.seen = self.seen or bool(record.exc_info)
        return bool(state.get("verbose"))


@contextlib.contextmanager
def _quiet_dispatcher() -> Iterator[_Traceback]:
    # The failed call's output already says what went wrong; its traceback (logged by the
    # dispatcher at DEBUG) is for --verbose only.
    log = logging.getLogger("bridge.tools.dispatch")
    level = log.level
    watch = _Traceback()
    log.filters.insert(0, watch)  # before `_ShownElsewhere`, which drops these records
    log.setLevel(logging.DEBUG)  # so that the traceback's record is made, and noted
    try:
        yield watch
    finally:
        log.setLevel(level)
        log.removeFilter(watch)


def _approver(yes: bool) -> tuple[Approver | None, str | None]:
    """Who decides about a confirm tool: --yes, the person at the terminal, or nobody."""
    if yes:
        return (lambda call: True), None
    if not sys.stdin.isatty():
        return None, "no terminal to ask on; pass --yes to run it without asking"

    def ask(call: ToolCall) -> bool:
        from bridge.tools.approval import question

        # Not typer.confirm: its prompt ends with a space written to stdout, which holds the
        # tool's output.
        typer.echo(f"{question(call.name, call.arguments)}\nRun it? [y/N] ", nl=False, err=True)
        try:
            line = sys.stdin.readline()
        except KeyboardInterrupt:
            line = ""
        if not line.endswith("\n"):  # Ctrl+C or Ctrl+D at the prompt is a no
            typer.echo("", err=True)
        return line.strip().lower() in ("y", "yes")

    return ask, None


def _principal(roles: list[str]) -> Principal:
    """The person at the terminal; with --role, in those roles instead of ``admin``."""
    import dataclasses

    from bridge.access import LOCAL

    return dataclasses.replace(LOCAL, roles=frozenset(roles)) if roles else LOCAL


@app.command("call")
def call(
    spec: Annotated[
        str,
        typer.Argument(
            help="Where the tool comes from: a .py file, a module name, a .yaml/.json HTTP tools "
            "manifest, 'openapi:...' or 'mcp:...'."
        ),
    ],
    tool: Annotated[str, typer.Argument(help="The name of the tool to run.")],
    args_json: Annotated[
        str,
        typer.Argument(help="The arguments as a JSON object; '-' reads them from stdin."),
    ] = "{}",
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            help="Seconds before the call is abandoned, unless the tool sets its own timeout.",
        ),
    ] = 60.0,
    allow_host: AllowHostOpt = [],  # noqa: B006 - typer needs a literal default
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            "-y",
            help="Run a confirm tool without asking. Without it you are asked on the terminal, "
            "and with no terminal the call is refused.",
        ),
    ] = False,
    policy_file: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            help="A Cedar policy file: the call runs only if it allows it (a call it sends to "
            "approval is asked about like a confirm tool's).",
            show_default=False,
        ),
    ] = None,
    role: Annotated[
        list[str],
        typer.Option(
            "--role",
            help="With --policy: decide as a caller in this role (Cedar: principal in "
            'Role::"ROLE") instead of the local user (role admin). Repeat for more.',
        ),
    ] = [],  # noqa: B006 - typer needs a literal default
) -> None:
    """Run one tool through the dispatcher and print its output.

    A confirm tool asks "Run it? [y/N]" first when stdin is a terminal; without a terminal it
    is refused unless --yes. With --policy, the policy decides first: a refused call is not run
    (the policy and its reason are printed), a call it sends to approval is asked about the
    same way. Exit code 0 when the tool ran, 1 when the run has an error kind (unknown tool,
    invalid arguments, refused, tool error, timeout; the output goes to stderr), 2 for usage
    errors (including a policy file that cannot be read).
    """
    from bridge.access import ALLOW, CallFacts
    from bridge.errors import UsageError
    from bridge.loading import load_tools
    from bridge.tools.approval import decide
    from bridge.tools.dispatch import Dispatcher
    from bridge.types import ToolCall

    # As `python -m` does (and `toolbridge manifest`): modules next to the cwd are importable.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        arguments = _parse_arguments(args_json)
        try:
            toolbox = load_tools([spec], allow_hosts=allow_host)
        except UsageError:
            raise
        except Exception as exc:  # an import-time error of the user's file, never a traceback
            raise UsageError(f"cannot load {spec!r}: {type(exc).__name__}: {exc}") from None
        policy = None
        if policy_file is not None:
            from bridge.access.policy import Policy

            try:
                policy = Policy.from_file(policy_file)
            except UsageError:
                toolbox.close()
                raise
        dispatcher = Dispatcher(toolbox, default_timeout=timeout)
    except UsageError as exc:
        fail(exc, code=EXIT_USAGE)
    call = ToolCall(call_id="cli", name=tool, arguments=arguments)
    # The toolbox stops MCP servers it started.
    with toolbox, dispatcher, _quiet_dispatcher() as traceback:
        found = toolbox.get(tool)
        decision = ALLOW
        if policy is not None and found is not None:  # an unknown tool: the dispatcher says so
            decision = policy.decide(_principal(role), CallFacts.of(tool, found, arguments))
        approve, nobody = _approver(yes)
        if decision.refused:
            run = dispatcher.reject(call, decision.refusal())
        else:
            verdict = decide(found, call, approve, nobody=nobody, required=decision.needs_approval)
            if verdict.run:
                [run] = dispatcher.run([call])
            else:
                run = dispatcher.reject(call, verdict.reason)
    if run.error is None:
        typer.echo(run.output)
        return
    typer.echo(run.output, err=True)
    if run.error == "tool_error" and traceback.seen and not state.get("verbose"):
        typer.echo("(run `toolbridge -v call ...` to see the traceback)", err=True)
    raise typer.Exit(EXIT_FAILED)
