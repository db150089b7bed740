"""Daemon settings (flags > environment > TOML) and the Prometheus exposition, in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.daemon.failpoints import failpoint_from_env
from bridge.daemon.settings import SettingsError, load_settings
from bridge.errors import UsageError

KEY = "k" * 24


def test_defaults() -> None:
    settings = load_settings({}, env={})
    assert (settings.host, settings.port, settings.workers, settings.db) == (
        "127.0.0.1", 8411, 16, str(Path.home() / ".local/state/toolbridge/toolbridge.db"),
    )  # fmt: skip
    assert settings.api_key is None and settings.max_body_bytes == 65536


def test_the_default_journal_is_in_the_state_directory(tmp_path: Path) -> None:
    from bridge.daemon.settings import default_db

    env = {"XDG_STATE_HOME": str(tmp_path)}
    assert load_settings({}, env=env).db == str(tmp_path / "toolbridge" / "toolbridge.db")
    assert default_db({"XDG_STATE_HOME": "relative/dir"}) == default_db({})  # XDG: ignored
    assert load_settings({"db": "here.db"}, env=env).db == "here.db"
    assert load_settings({}, env={**env, "TOOLBRIDGE_DB": ":memory:"}).db == ":memory:"


def test_flags_beat_env_beat_file(tmp_path: Path) -> None:
    config = tmp_path / "toolbridge.toml"
    config.write_text(
        'tools = ["a.py"]\nport = 9000\nworkers = 4\ngrace = 5.0\nmax-rounds = 3\n',
        encoding="utf-8",
    )
    env = {"TOOLBRIDGE_PORT": "9100", "TOOLBRIDGE_WORKERS": "8", "TOOLBRIDGE_TOOLS": "b.py, c"}
    settings = load_settings({"port": 9200, "tools": []}, env=env, config=config)
    assert settings.port == 9200, "flag"
    assert settings.workers == 8, "environment"
    assert settings.tools == ["b.py", "c"], "environment (an empty flag list means not given)"
    assert settings.grace == 5.0 and settings.max_rounds == 3, "file"


def test_config_from_env_and_serve_table(tmp_path: Path) -> None:
    config = tmp_path / "t.toml"
    config.write_text("[serve]\nworkers = 2\n", encoding="utf-8")
    assert load_settings({}, env={"TOOLBRIDGE_CONFIG": str(config)}).workers == 2


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        ({"host": "0.0.0.0"}, {}, "binding 0.0.0.0 exposes the daemon beyond this machine"),
        ({"host": "10.1.2.3"}, {}, "needs an API key: pass --api-key"),
        (
            {"api_key": "short"},
            {},
            "too short (5 characters); use at least 16 random characters, e.g. from "
            "`openssl rand -hex 24` (from --api-key)",
        ),
        (
            {},
            {"TOOLBRIDGE_PORT": "eighty"},
            "Input should be a valid integer, unable to parse string as an integer "
            "(from TOOLBRIDGE_PORT='eighty')",
        ),
        ({"workers": 0}, {}, "Input should be greater than or equal to 1 (from --workers)"),
        (
            {"platform": "nowhere"},
            {},
            "unknown platform 'nowhere'; expected one of: appbuilder, openai",
        ),
        ({"model": "m"}, {}, "model is for platform openai"),
        ({"platform": "openai", "token": "t" * 10}, {}, "token is for platform appbuilder"),
    ],
)
def test_bad_settings_name_their_source(
    flags: dict[str, object], env: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(flags, env=env)
    assert message in str(info.value)
    assert isinstance(info.value, UsageError), "the CLI turns it into exit code 2"


def test_loopback_aliases_need_no_key() -> None:
    for host in ("localhost", "127.0.0.2", "::1"):
        assert load_settings({"host": host}, env={}).host == host
    assert load_settings({"host": "0.0.0.0", "api_key": KEY}, env={}).api_key is not None


def test_bad_config_files(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="config file not found"):
        load_settings({}, env={}, config=tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("port = = 1\n", encoding="utf-8")
    with pytest.raises(SettingsError, match=r"broken\.toml: not valid TOML"):
        load_settings({}, env={}, config=broken)
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("prot = 1\n", encoding="utf-8")
    with pytest.raises(SettingsError, match="unknown setting 'prot'; expected one of: tools"):
        load_settings({}, env={}, config=unknown)
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('grace = "soon"\n', encoding="utf-8")
    with pytest.raises(
        SettingsError, match=r"Input should be a valid number.*\(from grace in .*wrong.toml\)"
    ):
        load_settings({}, env={}, config=wrong)


def test_a_bad_secret_from_the_environment_is_not_echoed() -> None:
    with pytest.raises(SettingsError) as info:
        load_settings({}, env={"TOOLBRIDGE_API_KEY": "tiny-secret"})
    assert "tiny-secret" not in str(info.value)
    assert "(from TOOLBRIDGE_API_KEY)" in str(info.value)


def test_secrets_stay_secret_in_reprs() -> None:
    settings = load_settings({"api_key": KEY, "token": "bce-v3/ALTAK-secret"}, env={})
    assert KEY not in repr(settings) and "ALTAK-secret" not in repr(settings)
    assert settings.platform_options()["token"] == "bce-v3/ALTAK-secret"


def test_failpoint_spec_is_checked() -> None:
    assert failpoint_from_env({}) is None
    with pytest.raises(UsageError, match="expected STEP:MARKER_FILE"):
        failpoint_from_env({"TOOLBRIDGE_FAILPOINT": "sometime:/tmp/x"})


def test_allow_hosts_from_flags_env_and_file(tmp_path: Path) -> None:
    assert load_settings({"allow_hosts": ["a.example"]}, env={}).allow_hosts == ["a.example"]
    env = {"TOOLBRIDGE_ALLOW_HOSTS": "b.example, c.example:8080"}
    assert load_settings({}, env=env).allow_hosts == ["b.example", "c.example:8080"]
    config = tmp_path / "toolbridge.toml"
    config.write_text('allow_hosts = ["d.example"]\n', encoding="utf-8")
    assert load_settings({}, env={}, config=config).allow_hosts == ["d.example"]


def test_sqlite_sync_setting() -> None:
    assert load_settings({}, env={}).sqlite_sync == "full"
    assert load_settings({}, env={"TOOLBRIDGE_SQLITE_SYNC": "normal"}).sqlite_sync == "normal"
    with pytest.raises(UsageError, match="--sqlite-sync"):
        load_settings({"sqlite_sync": "off"}, env={})


def test_replica_settings() -> None:
    import os
    import socket

    settings = load_settings({}, env={})
    assert settings.lease_seconds == 15.0
    assert settings.replica() == f"{socket.gethostname()}:8411"
    assert load_settings({"port": 0}, env={}).replica().endswith(f":pid{os.getpid()}")
    env = {"TOOLBRIDGE_REPLICA_ID": "bridge-2.dc1:8411", "TOOLBRIDGE_LEASE_SECONDS": "5"}
    chosen = load_settings({}, env=env)
    assert (chosen.replica(), chosen.lease_seconds) == ("bridge-2.dc1:8411", 5.0)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"replica_id": "has space"}, r"'has space' is not a replica id: use 1-100 letters"),
        ({"replica_id": ""}, r"'' is not a replica id"),
        ({"replica_id": "x" * 101}, r"is not a replica id"),
        ({"replica_id": "a\nb"}, r"is not a replica id"),
        ({"lease_seconds": 0.5}, r"greater than or equal to 1 \(from --lease-seconds\)"),
        ({"lease_seconds": 7200}, r"less than or equal to 3600 \(from --lease-seconds\)"),
    ],
)
def test_bad_replica_settings_say_what_is_expected(flags: dict[str, object], expected: str) -> None:
    with pytest.raises(SettingsError, match=expected):
        load_settings(flags, env={})


def test_stream_limits_from_flags_env_and_file(tmp_path: Path) -> None:
    config = tmp_path / "toolbridge.toml"
    config.write_text("max_tool_calls = 16\nrun_timeout = 30.5\n", encoding="utf-8")
    env = {"TOOLBRIDGE_MAX_ANSWER_CHARS": "65536", "TOOLBRIDGE_RUN_TIMEOUT": "60"}
    settings = load_settings({"max_arguments_chars": "1024"}, env=env, config=config)
    assert settings.platform_options() == {
        "max_arguments_chars": 1024,
        "max_answer_chars": 65536,
        "run_timeout": 60.0,
        "max_tool_calls": 16,
    }


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"TOOLBRIDGE_RUN_TIMEOUT": "never"}, "'never' is not a number of seconds > 0"),
        ({"TOOLBRIDGE_MAX_TOOL_CALLS": "0"}, "'0' is not an integer >= 1"),
    ],
)
def test_a_bad_stream_limit_names_its_source(env: dict[str, str], expected: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({}, env=env)
    assert expected in str(caught.value) and next(iter(env)) in str(caught.value)
