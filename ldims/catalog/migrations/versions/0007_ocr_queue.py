"""The version of a document an extract worker handed to the OCR workers (queue ``ocr``).

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.add_column(sa.Column("ocr_sha256", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.drop_column("ocr_sha256")
