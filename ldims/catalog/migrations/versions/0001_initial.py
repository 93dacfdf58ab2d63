"""Documents and webhook events.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

from ldims.catalog.models import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "documents",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("collection", sa.String(128), nullable=False),
        sa.Column("name", sa.String(512), nullable=False),
        sa.Column("format", sa.String(128)),
        sa.Column("size", sa.BigInteger),
        sa.Column("sha256", sa.String(64)),
        sa.Column("submitter", sa.String(256)),
        sa.Column("document_type", sa.String(128)),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("status_changed_at", UTCDateTime, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("error_code", sa.String(64)),
        sa.Column("error_message", sa.Text),
        sa.Column("extracted_at", UTCDateTime),
        sa.Column("extractor", sa.String(64)),
        sa.Column("page_count", sa.Integer),
        sa.Column("language", sa.String(16)),
        sa.Column("title", sa.String(512)),
        sa.Column("source_url", sa.Text),
    )
    op.create_index("ix_documents_tenant_status", "documents", ["tenant", "status"])
    op.create_index("ix_documents_tenant_created", "documents", ["tenant", "created_at"])
    op.create_index("ix_documents_tenant_sha", "documents", ["tenant", "sha256"])
    op.create_index("ix_documents_status_changed", "documents", ["status", "status_changed_at"])
    op.create_table(
        "webhook_events",
        sa.Column("event_id", sa.String(200), primary_key=True),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("event_type", sa.String(32), nullable=False),
        sa.Column("document_id", sa.String(64)),
        sa.Column("received_at", UTCDateTime, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("webhook_events")
    op.drop_table("documents")
