"""One redaction step where events and responses are made: a property over every event type.

The secrets are registered the way the daemon does at start (`create_app`): a platform token
and a database password in its settings, API keys in a key file, an HTTP tool's ``${ENV}``
credential in a manifest it loads. The event types are read from the code (every name handed
to a ``publish`` and every one `event_payload` makes, and every event class of a run), so a
new event type is in the property the day it is written; a new place that builds an
`SseEvent` outside the two ``publish`` methods fails `test_events_are_made_in_one_place`.
"""

from __future__ import annotations

import ast
import json
import secrets
import typing
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import bridge
from bridge import types as bridge_types
from bridge.daemon.app import create_app
from bridge.daemon.hub import EventHub, SseEvent
from bridge.daemon.models import MessageResult
from bridge.daemon.outbound import PublicJSONResponse, json_data
from bridge.daemon.runs import RunHandle, StreamedText, event_payload
from bridge.daemon.settings import load_settings
from bridge.errors import register_secret
from bridge.journal import MemoryJournal

DAEMON = Path(bridge.__file__).parent / "daemon"

SECRETS = {
    "platform token": "tok-" + secrets.token_hex(12),
    "API key": "key-" + secrets.token_hex(12),
    "${ENV} credential": "env-" + secrets.token_hex(12),
    "database password": "pw" + secrets.token_hex(12),
}


@pytest.fixture(scope="module", autouse=True)
def registered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A daemon app made as `toolbridge serve` makes it, with every kind of secret; not
    served (registering happens at start, before anything is served)."""
    folder = tmp_path_factory.mktemp("redaction")
    keys = folder / "keys.txt"
    keys.write_text(f"ops: {SECRETS['API key']}\n", encoding="utf-8")
    manifest = folder / "service.yaml"
    manifest.write_text(
        "base_url: http://127.0.0.1:9\n"
        'headers: {X-Api-Key: "${TB_REDACTION_CREDENTIAL}"}\n'
        "tools:\n  - name: status\n    description: Status.\n    url: /status\n",
        encoding="utf-8",
    )
    settings_ = load_settings(
        {
            "platform": "appbuilder",
            "app_id": "app",
            "base_url": "http://127.0.0.1:9",
            "token": SECRETS["platform token"],
            "api_key_file": str(keys),
            "db": f"postgresql://tb:{SECRETS['database password']}@127.0.0.1:9/tb",
            "tools": [str(manifest)],
        },
        env={},
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TB_REDACTION_CREDENTIAL", SECRETS["${ENV} credential"])
        app = create_app(settings_, journal=MemoryJournal())
    app.state.service.tools.close()
    app.state.service.platform.close()
    yield


# --- the event types, read from the code -----------------------------------------------------


def _sources() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text("utf-8"))) for path in sorted(DAEMON.rglob("*.py"))]


def _published_names() -> set[str]:
    """Every event name given as a literal to a ``publish``/``publish_run`` call, or made by
    `event_payload` (the names of a run's loop events)."""
    names: set[str] = set()
    for _, tree in _sources():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("publish", "publish_run", "_publish_run")
            ):
                for arg in node.args[:2]:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        names.add(arg.value)
            if isinstance(node, ast.FunctionDef) and node.name == "event_payload":
                for inner in ast.walk(node):
                    if (
                        isinstance(inner, ast.Return)
                        and isinstance(inner.value, ast.Tuple)
                        and isinstance(inner.value.elts[0], ast.Constant)
                    ):
                        names.add(str(inner.value.elts[0].value))
    return names


EVENT_NAMES = sorted(_published_names())
RUN_EVENTS = typing.get_args(bridge_types.Event)


def test_the_event_types_are_found() -> None:
    # The enumeration itself works: the events the console and clients rely on are in it.
    for name in (
        "run_started",
        "run_ended",
        "tool_calls",
        "tool_call_started",
        "tool_call_finished",
        "text_delta",
        "approval_requested",
        "approval_decided",
        "conversation_created",
        "done",
    ):
        assert name in EVENT_NAMES
    assert bridge_types.ToolCallFinished in RUN_EVENTS and len(RUN_EVENTS) >= 8


def test_events_are_made_in_one_place() -> None:
    """`SseEvent`s are built only where data is redacted (the two ``publish`` methods) or
    carries nothing but the daemon's own words (the hub's ``hello`` and ``reset``, the
    ``shutting_down`` ending `GraceClock.follow` gives a run cut by a stop), or narrows a
    published (so redacted) event to what a caller may see (``/v1/events``' `_shown`)."""
    allowed = {
        ("hub.py", "publish"),
        ("hub.py", "follow"),
        ("hub.py", "_events"),
        ("runs.py", "publish"),
        ("shutdown.py", "follow"),
        ("events.py", "_shown"),
    }
    found: set[tuple[str, str]] = set()
    for path, tree in _sources():
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "SseEvent"
                ):
                    found.add((path.name, function.name))
    assert found <= allowed, f"SseEvent built outside the publish methods: {found - allowed}"


# --- strategies ---------------------------------------------------------------------------------

_ANY_CHARACTER = st.characters(exclude_categories=())  # lone surrogates included


def _secret_text(secret: str) -> st.SearchStrategy[str]:
    """Text that may hold the secret, anywhere, or be any text at all."""
    around = st.text(_ANY_CHARACTER, max_size=6)
    return st.one_of(
        st.builds(lambda a, b: a + secret + b, around, around),
        around,
    )


def _json(secret: str) -> st.SearchStrategy[Any]:
    text = _secret_text(secret)
    scalars = st.one_of(text, st.integers(), st.booleans(), st.none())
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(text, inner, max_size=3)
        ),
        max_leaves=8,
    )


def _of(annotation: Any, secret: str) -> st.SearchStrategy[Any]:
    """A value of a run event's field type, its strings holding the secret."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is str:
        return _secret_text(secret)
    if annotation is Any:
        return _json(secret)
    if annotation is float:
        return st.floats(min_value=0, max_value=1e6)
    if annotation is datetime:
        return st.just(datetime(2026, 1, 1, tzinfo=timezone.utc))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model(annotation, secret)
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return st.one_of(*(_of(arg, secret) for arg in args))
    if annotation is type(None):
        return st.none()
    if origin is dict:
        return st.dictionaries(_secret_text(secret), _json(secret), max_size=3)
    if origin is tuple:
        return st.lists(_of(args[0], secret), min_size=1, max_size=3).map(tuple)
    raise AssertionError(f"no strategy for {annotation!r}: extend _of")


def _model(cls: type[BaseModel], secret: str) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls)
    fields = {
        name: _of(hints[name], secret)
        for name, field in cls.model_fields.items()
        if not field.exclude and name != "kind"
    }
    return st.fixed_dictionaries(fields).map(lambda values: cls(**values))


def _assert_clean(raw: bytes) -> None:
    text = raw.decode("utf-8")  # also: every event is valid UTF-8 on the wire
    for kind, secret in SECRETS.items():
        assert secret not in text, f"the {kind} went out"


# --- the properties -------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("kind", list(SECRETS))
@pytest.mark.parametrize("name", EVENT_NAMES)
def test_every_published_event_is_redacted(name: str, kind: str, data: st.DataObject) -> None:
    payload = data.draw(st.dictionaries(st.text(max_size=8), _json(SECRETS[kind]), max_size=4))
    hub = EventHub()
    hub.publish(name, payload)
    handle = RunHandle("c", "r")
    handle.publish(name, payload)
    [published] = hub.since(0)[0]
    _assert_clean(published.encode())
    _assert_clean(handle.history[-1].encode())


@settings(max_examples=40, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("kind", list(SECRETS))
@pytest.mark.parametrize("event_class", RUN_EVENTS, ids=lambda c: c.__name__)
def test_every_run_event_is_redacted(
    event_class: type[BaseModel], kind: str, data: st.DataObject
) -> None:
    event = data.draw(_model(event_class, SECRETS[kind]))
    payload = event_payload(event)  # type: ignore[arg-type]
    if payload is None:
        return  # not sent to clients at all
    hub = EventHub()
    handle = RunHandle("c", "r")
    hub.publish(*payload)
    handle.publish(*payload)
    _assert_clean(hub.since(0)[0][0].encode())
    _assert_clean(handle.history[-1].encode())


def _streamed(pieces: list[str]) -> list[SseEvent]:
    """The events a run publishes for answer text streamed in `pieces` (each fed to a
    `StreamedText`, what it lets out sent as a ``text_delta``, then what it kept back)."""
    stream = StreamedText()
    handle = RunHandle("c", "r")
    for piece in pieces:
        out = stream.feed(piece)
        if out:
            handle.publish("text_delta", {"text": out})
    rest = stream.flush()
    if rest:
        handle.publish("text_delta", {"text": rest})
    return list(handle.history)


@settings(max_examples=80, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("kind", list(SECRETS))
def test_streamed_answer_text_never_spells_a_secret(kind: str, data: st.DataObject) -> None:
    """A secret cut across text deltas is masked like a whole one: not in any event, nor in
    the text a client puts together from them."""
    secret = SECRETS[kind]
    text = data.draw(_secret_text(secret)) + data.draw(_secret_text(secret))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    history = _streamed(pieces)
    wire = b"".join(event.encode() for event in history)
    _assert_clean(wire)
    joined = "".join(event.data["text"] for event in history)
    for secret_ in SECRETS.values():
        assert secret_ not in joined


def test_a_whole_secret_is_not_cut_where_another_secret_begins() -> None:
    """A secret whose last characters are the first of another registered secret: the stream
    must not keep those characters back and send the rest of the secret unmasked."""
    first = "ovl-" + secrets.token_hex(10) + "zq"
    second = "zq" + secrets.token_hex(10)
    register_secret(first)
    register_secret(second)
    joined = "".join(event.data["text"] for event in _streamed(["before ", first]))
    assert joined == "before [secure]"


@settings(max_examples=40, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("kind", list(SECRETS))
def test_json_responses_are_redacted(kind: str, data: st.DataObject) -> None:
    """Every JSON body (the app's default response class): a run's result, for one."""
    secret = SECRETS[kind]
    run = data.draw(_model(bridge_types.ToolRun, secret))
    result = MessageResult(
        conversation_id="c",
        message_id=1,
        status="finished",
        answer=data.draw(_secret_text(secret)),
        rounds=1,
        tool_runs=[run],
        request_ids=[],
    )
    # Encoded as the routes encode it (`json_data`: a lone surrogate in a drawn argument key
    # is made valid text, which a plain model_dump refuses).
    body = PublicJSONResponse(json_data(result)).body
    _assert_clean(bytes(body))
    json.loads(body)


def test_a_lone_surrogate_in_a_nested_argument_key_is_sent_as_valid_text() -> None:
    """A platform may send ``{"a": {"\\ud800": 1}}`` (a JSON escape without its other half):
    pydantic refuses to encode such a key, which used to fail the run's events and its answer
    after the tools had run."""
    call = bridge_types.ToolCall(call_id="c1", name="t", arguments={"a": {"k\ud800": 1}})
    batch = bridge_types.ToolBatch(batch_id="b", calls=(call,), resume={})
    events = [
        bridge_types.ToolCallsRequested(batch=batch),
        bridge_types.ToolCallStarted(call=call),
    ]
    handle = RunHandle("c", "r")
    for event in events:
        payload = event_payload(event)
        assert payload is not None
        handle.publish(*payload)
    wire = b"".join(event.encode() for event in handle.history)
    assert "k\ufffd".encode() in wire
    wire.decode("utf-8")  # valid text throughout
    started = datetime.now(timezone.utc)
    run = bridge_types.ToolRun(
        call_id="c1",
        name="t",
        arguments=call.arguments,
        output="ok",
        started_at=started,
        duration_ms=1.0,
    )
    result = MessageResult.model_validate(
        {
            "conversation_id": "c",
            "message_id": 1,
            "status": "finished",
            "answer": "done",
            "rounds": 1,
            "tool_runs": [run],
            "request_ids": [],
        }
    )
    body = PublicJSONResponse(json_data(result)).body
    assert "k\ufffd".encode() in body
