"""Tables in PDFs: pick the pages that can hold a ruled table, then let pdfplumber find them.

pdfplumber's default table finder builds cells from ruling lines, and parsing a page's layout
is its expensive part (tens of milliseconds a page, seconds on a vector drawing). So pypdfium2,
which has the page open anyway, first looks at the page's path objects: a page needs both
horizontal and vertical rules (or a rectangle) to yield a cell. Pages with only horizontal
rules, typically the lines under running headers, are skipped without asking pdfplumber.

Tables are a bonus: any failure here is counted, logged and otherwise ignored.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from pathlib import Path

import pdfplumber
import pypdfium2
import pypdfium2.raw as pdfium_c

from ldims.text import Table
from workers.extraction.common import rows_to_text

logger = logging.getLogger(__name__)

# A path thinner than this (in points) in one direction is a rule; thicker in both, a shape.
_RULE_THICKNESS = 8.0
# A page with more objects is a vector drawing (map, chart): pdfplumber would spend seconds
# on it and ruled tables are not drawn that way.
_MAX_PAGE_OBJECTS = 10_000


def may_hold_table(page: pypdfium2.PdfPage) -> bool:
    """Whether the page draws what a ruled table needs: a shape, or rules in both directions."""
    if pdfium_c.FPDFPage_CountObjects(page) > _MAX_PAGE_OBJECTS:
        return False
    horizontal = vertical = False
    for path in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_PATH], max_depth=3):
        try:
            left, bottom, right, top = path.get_bounds()
        except pypdfium2.PdfiumError:
            continue
        wide, tall = right - left >= _RULE_THICKNESS, top - bottom >= _RULE_THICKNESS
        if wide and tall:
            return True
        horizontal = horizontal or wide
        vertical = vertical or tall
        if horizontal and vertical:
            return True
    return False


def extract_tables(path: Path, page_numbers: Sequence[int]) -> tuple[list[Table], int]:
    """Tables on the given 1-based pages, and how many pages failed (0 when all went well)."""
    if not page_numbers:
        return [], 0
    tables: list[Table] = []
    failed = 0
    # pdfminer warns about every oddity of a malformed but readable file; tables are best
    # effort, and a warning must not turn into a failed page where warnings are errors.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            # The empty password opens files encrypted without a user password, like pdfium.
            document = pdfplumber.open(path, pages=list(page_numbers), password="")
        except Exception as exc:  # pdfminer raises many unrelated types on damaged files
            logger.info("pdfplumber cannot open the file, tables skipped: %s", type(exc).__name__)
            return [], len(page_numbers)
        with document:
            try:
                pages = document.pages  # walks the page tree, which may be damaged
            except Exception as exc:
                logger.info("pdfplumber cannot list the pages: %s", type(exc).__name__)
                return [], len(page_numbers)
            for page in pages:
                try:
                    tables.extend(_page_tables(page))
                except Exception as exc:  # one damaged page must not cost the others
                    failed += 1
                    logger.info(
                        "Tables of page %d skipped: %s", page.page_number, type(exc).__name__
                    )
                finally:
                    # pdfplumber caches every parsed page on the document until closed.
                    page.close()
    return tables, failed


def _page_tables(page: pdfplumber.page.Page) -> list[Table]:
    found = []
    for rows in page.extract_tables():
        text = rows_to_text(rows)
        if text:
            found.append(Table(page=page.page_number, text=text))
    return found
