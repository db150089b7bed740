"""What a conversation costs the database: a daemon on a PostgreSQL journal sends at most
`BUDGET` SQL statements per conversation (created, one message with one tool round), counted
in the server's own log (``log_statement = all``), so the number cannot grow unnoticed.

A step of a run is one statement committed on its own (its rows and its lease check in it),
reads carry no BEGIN/COMMIT, and the events that the relay forwards to other replicas go out
together; before that, the same conversation took 77 statements. Then 21: since, the lease
brings what a run reads first, the calls just written are not read back, a fenced batch is
received in one statement, and a replica alone sends no events (11).
"""

from __future__ import annotations

import collections
import re
from pathlib import Path

import pytest

from bridge.emulator import Emulator
from tests.daemon.conftest import start_daemon
from tests.support.postgres import PostgresServer, find_binaries

pytestmark = pytest.mark.skipif(
    find_binaries() is None, reason="no PostgreSQL server binaries (make test installs them)"
)

BUDGET = 12
COUNTED = 4
STATEMENT = re.compile(r"LOG:  (?:statement|execute [^:]*): (.*)")


def test_a_conversation_costs_at_most_the_budget_in_sql_statements(
    emulator: Emulator, tools_dir: Path
) -> None:
    # A server of its own: the log holds this daemon's statements and no other test's.
    with PostgresServer() as server:
        dsn = server.create_database("statements")
        server.psql("ALTER DATABASE statements SET log_statement = 'all';\n", "postgres")
        daemon = start_daemon(emulator, tools_dir, dsn)
        try:
            # The first conversation warms up (the pool's connections, prepared statements).
            for counted in (False, True):
                if counted:
                    start = server.log_path.stat().st_size
                for _ in range(COUNTED if counted else 1):
                    cid = daemon.new_conversation()
                    response = daemon.ask(cid, "weather in Paris")
                    assert response.status_code == 200, response.text
                    ran = response.json()
                    assert ran["status"] == "finished", ran
                    assert ran["rounds"] == 1 and len(ran["tool_runs"]) == 1, "one tool round"
        finally:
            daemon.stop()  # the relay's last events and the lease's release are sent first
        log = server.log_path.read_bytes()[start:].decode("utf-8", errors="replace")
    found = STATEMENT.findall(log)
    kinds = collections.Counter(" ".join(s.split()[:4]) or "(multi-line)" for s in found)
    per_conversation = len(found) / COUNTED
    assert per_conversation <= BUDGET, (
        f"{per_conversation:.1f} SQL statements per conversation (budget {BUDGET}): "
        + ", ".join(f"{n / COUNTED:g} {kind}" for kind, n in kinds.most_common())
    )
