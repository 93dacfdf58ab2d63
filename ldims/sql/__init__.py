"""The safe SQL toolset: statements are parsed (sqlglot), checked and rendered before they run.

Only what ``__all__`` lists is public; the guard's helpers stay in :mod:`ldims.sql.guard`.
"""

from ldims.sql.errors import RULES, SqlObjectNotFound, SqlRejected, SqlSyntaxError, SqlTimeout
from ldims.sql.guard import (
    DENIED_FUNCTIONS,
    DENIED_PREFIXES,
    DIALECTS,
    Dialect,
    ReadPlan,
    WritePlan,
    check_read,
    check_write,
    dialect_of,
)

__all__ = [
    "DENIED_FUNCTIONS",
    "DENIED_PREFIXES",
    "DIALECTS",
    "RULES",
    "Dialect",
    "ReadPlan",
    "SqlObjectNotFound",
    "SqlRejected",
    "SqlSyntaxError",
    "SqlTimeout",
    "WritePlan",
    "check_read",
    "check_write",
    "dialect_of",
]
