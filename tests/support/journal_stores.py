"""The journal stores the behavioural suites run against, one entry per store.

Each entry makes an empty store (`tests/journal/test_journal.py` and
`tests/journal/test_journal_behaviour.py` take the `journal` fixture below, parametrised over
`STORES`); a store that needs a server gets it from the pytest `request` (e.g.
``request.getfixturevalue("postgres")``, the real PostgreSQL server of
`tests/support/postgres.py`), so PostgreSQL joins with one entry here and no test changes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bridge.journal import Journal, MemoryJournal, SQLiteJournal
from tests.support.postgres import PostgresServer

__all__ = ["STORES", "journal"]


def _postgres(request: pytest.FixtureRequest, tmp_path: Path) -> Journal:
    """A `PostgresJournal` on a fresh database of the session's test server."""
    from bridge.journal.postgres import PostgresJournal

    server: PostgresServer = request.getfixturevalue("postgres")
    return PostgresJournal(server.create_database(f"j_{uuid.uuid4().hex[:12]}"))


StoreFactory = Callable[[pytest.FixtureRequest, Path], Journal]

STORES: dict[str, StoreFactory] = {
    "memory": lambda request, tmp_path: MemoryJournal(),
    "sqlite": lambda request, tmp_path: SQLiteJournal(tmp_path / "j.db"),
    "postgres": _postgres,
}


@pytest.fixture(params=list(STORES))
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Journal]:
    """An empty journal of each store in `STORES`, closed afterwards."""
    store = STORES[request.param](request, tmp_path)
    try:
        yield store
    finally:
        store.close()
