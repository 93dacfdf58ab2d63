"""The embed stage's work on a document: why some chunks have no vector, the chunks embedded
so far, the end of a model call that was interrupted, the tries of a chunk alone, and the
claim of the task embedding it.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

from ldims.catalog.models import UTCDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.add_column(sa.Column("vectors_error", sa.Text()))
        batch.add_column(
            sa.Column("vectors_done", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("vectors_suspect_end", sa.Integer()))
        batch.add_column(
            sa.Column("vectors_attempts", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("vectors_lease_owner", sa.String(64)))
        batch.add_column(sa.Column("vectors_lease_until", UTCDateTime()))


def downgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        for column in (
            "vectors_lease_until",
            "vectors_lease_owner",
            "vectors_attempts",
            "vectors_suspect_end",
            "vectors_done",
            "vectors_error",
        ):
            batch.drop_column(column)
