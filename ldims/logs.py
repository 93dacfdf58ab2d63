"""Logging set-up for every LDIMS process (to stderr: stdout belongs to stdio MCP)."""

from __future__ import annotations

import logging
import sys


def setup_logging(level: str) -> None:
    level = "WARNING" if level == "WARN" else level
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s",
    )
    # Alembic announces every plugin at INFO on each start-up.
    logging.getLogger("alembic").setLevel(max(logging.WARNING, logging.getLogger().level))
    # pdfminer (under pdfplumber) quotes document text in its warnings; document text never
    # goes into our logs.
    logging.getLogger("pdfminer").setLevel(logging.ERROR)
