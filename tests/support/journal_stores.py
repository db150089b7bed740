"""The journal stores the behavioural suites run against, one entry per store.

Each entry makes an empty store (`tests/test_journal.py` and `tests/test_journal_behaviour.py`
take the `journal` fixture below, parametrised over `STORES`); a store that needs a server gets
it from the pytest `request` (e.g. ``request.getfixturevalue("postgres")``, the real
PostgreSQL server of `tests/support/postgres.py`), so PostgreSQL joins with one entry here and
no test changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bridge.journal import Journal, MemoryJournal, SQLiteJournal

__all__ = ["STORES", "journal"]

StoreFactory = Callable[[pytest.FixtureRequest, Path], Journal]

STORES: dict[str, StoreFactory] = {
    "memory": lambda request, tmp_path: MemoryJournal(),
    "sqlite": lambda request, tmp_path: SQLiteJournal(tmp_path / "j.db"),
}


@pytest.fixture(params=list(STORES))
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Journal]:
    """An empty journal of each store in `STORES`, closed afterwards."""
    store = STORES[request.param](request, tmp_path)
    try:
        yield store
    finally:
        store.close()
