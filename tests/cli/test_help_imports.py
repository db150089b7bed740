"""`toolbridge --help` renders without the modules it does not need, and leaves them working."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SKIPPED = ("rich.markdown", "rich.traceback", "markdown_it", "pydantic")

PROBE = """
import contextlib, io, json, sys
from bridge.cli import app
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        app(sys.argv[1:], prog_name="toolbridge")
    except SystemExit:
        pass
loaded = [name for name in SKIPPED if name in sys.modules]
import rich.markdown, rich.traceback, typer.rich_utils
markdown = typer.rich_utils.Markdown("*x*")
try:
    raise ValueError("boom")
except ValueError as exc:
    traceback = typer.rich_utils.Traceback.from_exception(type(exc), exc, exc.__traceback__)
print(json.dumps({
    "help": out.getvalue(),
    "loaded": loaded,
    "real": type(markdown) is rich.markdown.Markdown
    and isinstance(markdown, typer.rich_utils.Markdown)
    and type(traceback) is rich.traceback.Traceback
    and sys.modules["rich.markdown"].Markdown is rich.markdown.Markdown,
}))
""".replace("SKIPPED", repr(SKIPPED))


def _probe(*args: str) -> dict[str, object]:
    env = {**os.environ, "COLUMNS": "100"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_top_level_help_skips_markdown_traceback_and_pydantic() -> None:
    result = _probe("--help")
    assert "Usage: toolbridge [OPTIONS] COMMAND [ARGS]..." in str(result["help"])
    assert result["loaded"] == []
    assert result["real"] is True


def test_command_help_skips_them_too() -> None:
    result = _probe("run", "--help")
    assert "Usage: toolbridge run [OPTIONS]" in str(result["help"])
    assert result["loaded"] == []
    assert result["real"] is True


def test_group_help_of_db() -> None:
    result = _probe("db", "--help")
    assert "status" in str(result["help"]) and "upgrade" in str(result["help"])
    assert result["loaded"] == []


def test_a_typer_that_needs_more_of_them_gets_them() -> None:
    """If typer's renderer imports a name the stand-ins lack, it is imported the usual way."""
    probe = (
        "import contextlib, io, sys\n"
        "import bridge.cli._app as cli_app\n"
        "cli_app._DEFERRED = {'rich.markdown': 'NotMarkdown'}\n"
        "from bridge.cli import app\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    try:\n"
        "        app(['--help'], prog_name='toolbridge')\n"
        "    except SystemExit:\n"
        "        pass\n"
        "import rich.markdown, typer.rich_utils\n"
        "assert typer.rich_utils.Markdown is rich.markdown.Markdown\n"
        "print(out.getvalue())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "100"},
        timeout=120,
        check=True,
    )
    assert "Usage: toolbridge [OPTIONS] COMMAND [ARGS]..." in done.stdout
