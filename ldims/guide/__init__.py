"""Guided knowledge sessions (the knowledge-engine seed): decision trees from YAML/JSON files,
walked step by step with the state kept server-side in Redis.

Only what ``__all__`` lists is public.
"""

from pathlib import Path

from ldims.guide.engine import GuideEngine
from ldims.guide.errors import (
    GuideUnavailable,
    InvalidOption,
    SessionComplete,
    SessionExpired,
    SessionNotFound,
)
from ldims.guide.sessions import SessionStore
from ldims.guide.store import TreeStore
from ldims.guide.trees import Problem, Tree, TreeError, load_tree, validate_directory

# The example trees shipped with LDIMS (the default LDIMS_GUIDE_DIR).
SHIPPED_TREES = Path(__file__).resolve().parent / "trees"

__all__ = [
    "SHIPPED_TREES",
    "GuideEngine",
    "GuideUnavailable",
    "InvalidOption",
    "Problem",
    "SessionComplete",
    "SessionExpired",
    "SessionNotFound",
    "SessionStore",
    "Tree",
    "TreeError",
    "TreeStore",
    "load_tree",
    "validate_directory",
]
