"""Engine and sessions for the catalog; schema upgrades through Alembic.

SQLite runs in WAL mode with a busy timeout, because the API and several worker
processes write to the same file; PostgreSQL (or MySQL/MariaDB) is chosen by URL.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session, sessionmaker

log = logging.getLogger(__name__)
MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def make_engine(url: str) -> Engine:
    """An engine for ``url``; creates the SQLite file's folder when needed."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


class Catalog:
    """The catalog database of one process: an engine plus a session factory."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """A session that commits when the block ends normally and rolls back otherwise."""
        with self._sessions() as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise

    def ping(self) -> None:
        """Raise if the database does not answer."""
        with self.engine.connect() as connection:
            connection.execute(text("SELECT 1"))

    def upgrade(self) -> None:
        """Bring the schema to the newest migration."""
        upgrade_schema(self.url, self.engine)

    def dispose(self) -> None:
        self.engine.dispose()


def _alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # '%' is ConfigParser interpolation; URLs may carry escaped characters.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade_schema(url: str, engine: Engine | None = None) -> None:
    """Run Alembic's ``upgrade head`` on ``url`` (reusing ``engine`` when given)."""
    config = _alembic_config(url)
    owned = engine is None
    engine = engine or make_engine(url)
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
    finally:
        if owned:
            engine.dispose()
