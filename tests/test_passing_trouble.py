"""Troubles of the server, not of the document — a full disk, the catalog database away — are
retried, never recorded as the document's failure (the fault harness, ``bench/faults.py``,
shows it end to end: PostgreSQL crashed, the disk full)."""

from __future__ import annotations

import errno
import os

import pytest
import sqlalchemy

from ldims.errors import TransientError, passing_trouble, passing_trouble_is_transient
from tests.conftest import free_port


def test_a_full_disk_or_quota_is_a_passing_trouble() -> None:
    for number in (errno.ENOSPC, errno.EDQUOT):
        trouble = passing_trouble(OSError(number, os.strerror(number)))
        assert trouble is not None and trouble.code == "DISK_FULL"
    assert passing_trouble(OSError(errno.EACCES, "denied")) is None
    assert passing_trouble(ValueError("a bad file")) is None


def test_an_unreachable_catalog_database_is_a_passing_trouble() -> None:
    engine = sqlalchemy.create_engine(
        f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/none",
        connect_args={"connect_timeout": 2},
    )
    with pytest.raises(TransientError) as raised, passing_trouble_is_transient():
        engine.connect()
    engine.dispose()
    assert raised.value.code == "CATALOG_UNAVAILABLE"


def test_anything_else_goes_through_unchanged() -> None:
    with pytest.raises(KeyError), passing_trouble_is_transient():
        raise KeyError("not ours to retry")
    # /dev/full: the kernel's always-full device.
    with (
        pytest.raises(TransientError) as raised,
        passing_trouble_is_transient(),
        open("/dev/full", "wb") as full,
    ):
        full.write(b"x")
    assert raised.value.code == "DISK_FULL"
