"""Terminal rendering of a conversation's events: streamed answer, spinner, tool lines."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from bridge.types import (
    Event,
    HumanInputRequested,
    RunFailed,
    RunFinished,
    TextDelta,
    ToolCallFinished,
    ToolCallsRequested,
    ToolCallStarted,
    ToolRun,
)

__all__ = ["Renderer", "format_arguments", "result_json"]

_MAX_ARGS = 120


def format_arguments(arguments: dict[str, Any] | str) -> str:
    """Arguments as one short line."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return text if len(text) <= _MAX_ARGS else text[: _MAX_ARGS - 1] + "…"


class Renderer:
    """Writes the answer to stdout as it streams; tool lines and the spinner go to stderr."""

    def __init__(
        self, *, spinner: bool | None = None, one_stream: bool = False, indent: str = ""
    ) -> None:
        self.out = Console(highlight=False, soft_wrap=True)
        # A narration (the demo) reads best in order on one stream.
        self.err = self.out if one_stream else Console(stderr=True, highlight=False, soft_wrap=True)
        self.indent = indent
        self.answer_prefix = ""
        self.spinner = self.err.is_terminal if spinner is None else spinner
        self._status: Status | None = None
        self._mid_line = False

    def waiting(self, label: str = "waiting for the agent…") -> None:
        """Show a spinner until the next output."""
        if not self.spinner:
            return
        if self._status is None:
            self._status = self.err.status(label, spinner="dots")
            self._status.start()
        else:
            self._status.update(label)

    def _stop_spinner(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def _end_line(self) -> None:
        if self._mid_line:
            self.out.print()
            self._mid_line = False

    def handle(self, event: Event) -> None:
        """Render one event."""
        if isinstance(event, TextDelta):
            self._stop_spinner()
            if not self._mid_line and self.answer_prefix:
                self.out.print(self.answer_prefix, end="")
            self.out.print(event.text, end="", markup=False)
            self._mid_line = not event.text.endswith("\n")
        elif isinstance(event, ToolCallsRequested):
            self._end_line()
            names = ", ".join(call.name for call in event.batch.calls)
            self.waiting(f"running {names}…")
        elif isinstance(event, ToolCallStarted):
            pass
        elif isinstance(event, ToolCallFinished):
            self._stop_spinner()
            self.tool_line(event.run)
            self.waiting()
        elif isinstance(event, HumanInputRequested):
            self._stop_spinner()
            self._end_line()
            self.err.print(f"[yellow]? the agent asks for input[/yellow] {escape(event.prompt)}")
        elif isinstance(event, RunFinished | RunFailed):
            self._stop_spinner()
            self._end_line()

    def retrying(self, text: str) -> None:
        """The client backs off before trying the platform again: one yellow line."""
        self._stop_spinner()
        self._end_line()
        self.err.print(f"{self.indent}[yellow]…[/yellow] {escape(text)}")
        self.waiting()

    def tool_line(self, run: ToolRun) -> None:
        """One line per finished tool call: name, arguments, duration, and for a failure its
        kind and the first line of what the model was told (never a traceback)."""
        mark = "[green]✓[/green]" if run.error is None else "[red]✗[/red]"
        error = ""
        if run.error:
            kind = "error" if run.error == "tool_error" else run.error
            error = f" [red]{escape(kind)}:[/red] {escape(_first_line(run.output))}"
        arguments = escape(format_arguments(run.arguments))
        self.err.print(
            f"{self.indent}{mark} [bold]{escape(run.name)}[/bold]({arguments})"
            f" [dim]{run.duration_ms:.0f} ms[/dim]{error}"
        )

    def close(self) -> None:
        """Stop the spinner and end the answer's line."""
        self._stop_spinner()
        self._end_line()


def _first_line(text: str, limit: int = 300) -> str:
    line = next((part for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _parsed(arguments: dict[str, Any] | str) -> Any:
    """Arguments as JSON values: platforms that send a JSON string get it decoded."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments  # not JSON: shown as the agent sent it
    return arguments


def result_json(
    *,
    conversation_id: str | None,
    answer: str,
    rounds: int,
    tool_runs: list[ToolRun],
    request_ids: list[str],
    error: dict[str, Any] | None = None,
    human_input: dict[str, Any] | None = None,
) -> str:
    """The `--json` output: one object (`human_input` and `error` only when they apply)."""
    body: dict[str, Any] = {
        "conversation_id": conversation_id,
        "answer": answer,
        "rounds": rounds,
        "tool_runs": [
            {
                "call_id": run.call_id,
                "name": run.name,
                "arguments": _parsed(run.arguments),
                "output": run.output,
                "error": run.error,
                "duration_ms": round(run.duration_ms, 3),
            }
            for run in tool_runs
        ],
        "request_ids": request_ids,
    }
    if human_input is not None:
        body["human_input"] = human_input
    if error is not None:
        body["error"] = error
    return json.dumps(body, ensure_ascii=False)
