"""Callers across replicas on one PostgreSQL journal: each replica checks its own clients, the
journal says whose a conversation is, and the events one replica relays to another reach only
the callers who may see them."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from bridge.emulator import Emulator
from tests.daemon.conftest import start_daemon, stopped
from tests.daemon.test_door import call, events_until, write_callers
from tests.support.postgres import PostgresServer


@pytest.fixture
def dsn(postgres: PostgresServer) -> str:
    return postgres.create_database(f"d_{uuid.uuid4().hex[:12]}")


def test_a_conversation_is_its_creators_on_every_replica(
    emulator: Emulator, tools_dir: Path, tmp_path: Path, dsn: str
) -> None:
    callers = write_callers(
        tmp_path / "callers.toml",
        {
            "alice": {"roles": ["converse"]},
            "bob": {"roles": ["converse"]},
            "reader": {"roles": ["read_all"]},
        },
    )
    flags = ("--callers", str(callers))
    a = start_daemon(emulator, tools_dir, dsn, "--replica-id", "a", *flags)
    b = start_daemon(emulator, tools_dir, dsn, "--replica-id", "b", *flags)
    with stopped(a, b):
        cid = call(a, "alice", "POST", "/v1/conversations", json={}).json()["conversation_id"]
        # on b: bob is told it does not exist, alice and the reader see it
        assert call(b, "bob", "GET", f"/v1/conversations/{cid}").status_code == 404
        sent = call(b, "bob", "POST", f"/v1/conversations/{cid}/messages", json={"query": "x"})
        assert sent.status_code == 404
        assert call(b, "alice", "GET", f"/v1/conversations/{cid}").status_code == 200
        assert call(b, "reader", "GET", f"/v1/conversations/{cid}").status_code == 200

        # alice's run on a, relayed to b: bob's stream on b shows only his own conversation
        mine = call(b, "bob", "POST", "/v1/conversations", json={}).json()["conversation_id"]
        ran = call(a, "alice", "POST", f"/v1/conversations/{cid}/messages", json={"query": "hi"})
        assert ran.status_code == 200, ran.text
        assert call(b, "bob", "POST", f"/v1/conversations/{mine}/messages", json={"query": "hi"})
        bobs = events_until(b, "bob", mine)
        assert {d.get("conversation_id") for _, d in bobs} - {None} == {mine}
        readers = events_until(b, "reader", mine)
        assert cid in {d.get("conversation_id") for _, d in readers}
