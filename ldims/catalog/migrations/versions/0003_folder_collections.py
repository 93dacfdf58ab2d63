"""Folder collections (qmd's): the folders and their masks, the contexts that describe paths
in them, and each document's path under its folder.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

from ldims.catalog.models import UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("documents") as table:
        table.add_column(sa.Column("source_path", sa.String(1024)))
        table.add_column(sa.Column("source_mtime_ns", sa.BigInteger))
        table.create_index(
            "ix_documents_tenant_collection_path", ["tenant", "collection", "source_path"]
        )
    op.create_table(
        "folder_collections",
        sa.Column("tenant", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("pattern", sa.String(1024), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
    )
    op.create_table(
        "path_contexts",
        sa.Column("tenant", sa.String(64), primary_key=True),
        sa.Column("collection", sa.String(128), primary_key=True),
        sa.Column("prefix", sa.String(1024), primary_key=True),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("path_contexts")
    op.drop_table("folder_collections")
    with op.batch_alter_table("documents") as table:
        table.drop_index("ix_documents_tenant_collection_path")
        table.drop_column("source_mtime_ns")
        table.drop_column("source_path")
