"""`toolbridge serve`'s flags are made from `DaemonSettings`: one per setting, with its
default and variable in the help, and their values reach the settings."""

from __future__ import annotations

import pytest
import typer.main
from typer.testing import CliRunner

from bridge.cli import app
from bridge.daemon.settings import ENV_PREFIX, DaemonSettings, flag_of

GIVEN_ELSEWHERE = {"platform", "platform_settings"}  # --platform and the platform flags


def _serve_options() -> dict[str, object]:
    group = typer.main.get_command(app)
    ctx = group.make_context("toolbridge", ["serve"], resilient_parsing=True)
    command = group.get_command(ctx, "serve")  # type: ignore[attr-defined]
    assert command is not None
    return {opt: param for param in command.params for opt in param.opts}


def test_every_setting_has_a_flag_with_its_default_and_variable() -> None:
    options = _serve_options()
    for name, field in DaemonSettings.model_fields.items():
        if name in GIVEN_ELSEWHERE:
            continue
        flag = flag_of(name)
        assert flag in options, f"no {flag} for setting {name}"
        option = options[flag]
        assert option.name == name  # type: ignore[attr-defined]
        assert option.default in (None, [], ())  # type: ignore[attr-defined]  # unset: env/file count
        help_text = option.help or ""  # type: ignore[attr-defined]
        if field.default_factory is None and field.default not in (None, False):
            default = field.default
            shown = f"{default:g}" if isinstance(default, float) else str(default)
            assert f"(default {shown}" in help_text, (flag, help_text)
        if name not in ("tools", "allow_hosts"):  # their help is shared with `run`
            assert f"env {ENV_PREFIX}{name.upper()}" in help_text, (flag, help_text)


def test_help_lists_the_settings_flags() -> None:
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for flag in ("--queue-limit", "--server-name", "--log-json", "--log-text", "--lease-seconds"):
        assert flag in result.output
    assert "--config" in result.output and "--platform" in result.output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--workers", "0"], "(from --workers)"),
        (["--lease-seconds", "0.5"], "(from --lease-seconds)"),
        (["--server-name", "bad host!"], "(from --server-name)"),
        (["--replica-id", "a b"], "(from --replica-id)"),
    ],
)
def test_flag_values_reach_the_settings(args: list[str], expected: str) -> None:
    result = CliRunner().invoke(app, ["serve", "--db", ":memory:", *args], env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert expected in " ".join(result.output.split())
