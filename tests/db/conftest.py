"""The store every test of this directory works on: migrated, on SQLite and on
PostgreSQL (db_url, tests/conftest.py, runs each test on both)."""

import pytest

from pulsys.db.database import Database
from pulsys.db.migrate import migrate


@pytest.fixture
def db(db_url):
    d = Database.open(db_url)
    migrate(d)
    yield d
    d.close()
