"""What the embed stage records of each document: its chunk count and the version and model
of its stored vectors (a completed document whose vectors are of another version or model
still needs embedding).

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("documents") as table:
        table.add_column(sa.Column("chunk_count", sa.Integer))
        table.add_column(sa.Column("vectors_sha256", sa.String(64)))
        table.add_column(sa.Column("vectors_model", sa.String(128)))


def downgrade() -> None:
    with op.batch_alter_table("documents") as table:
        table.drop_column("vectors_model")
        table.drop_column("vectors_sha256")
        table.drop_column("chunk_count")
