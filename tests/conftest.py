"""Fixtures shared by every test directory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.journal_stores import journal
from tests.support.postgres import PostgresServer, postgres_session

# The `journal` fixture: an empty store of each kind, for the journal's behavioural suites.
__all__ = ["journal"]


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the whole session (skipped only when none is installed).

    Tests that kill or restart a server start their own `PostgresServer` instead.
    """
    yield from postgres_session()
