"""API keys stored hashed (tenant, user, scopes, expiry, revocation, last use), and the
proxy toolset's audit trail.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

from ldims.catalog.models import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(128)),
        sa.Column("scopes", sa.String(256), nullable=False),
        sa.Column("name", sa.String(128)),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("expires_at", UTCDateTime),
        sa.Column("revoked_at", UTCDateTime),
        sa.Column("last_used_at", UTCDateTime),
    )
    op.create_index("ix_api_keys_tenant", "api_keys", ["tenant"])
    op.create_table(
        "audit_records",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(128)),
        sa.Column("key_id", sa.String(32)),
        sa.Column("transport", sa.String(16), nullable=False),
        sa.Column("tool", sa.String(64), nullable=False),
        sa.Column("doc_id", sa.String(64)),
        sa.Column("trace_id", sa.String(128)),
        sa.Column("outcome", sa.String(64), nullable=False),
        sa.Column("tokens", sa.Integer, nullable=False),
        sa.Column("bytes", sa.Integer, nullable=False),
        sa.Column("masked", sa.Text),
        sa.Column("rate_state", sa.Text),
        sa.Column("latency_ms", sa.Float, nullable=False),
    )
    op.create_index("ix_audit_tenant_at", "audit_records", ["tenant", "at"])
    op.create_index("ix_audit_doc", "audit_records", ["tenant", "doc_id"])


def downgrade() -> None:
    op.drop_table("audit_records")
    op.drop_table("api_keys")
