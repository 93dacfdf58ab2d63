"""Text recognition in the document record: the pages read by OCR and the mean confidence.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.add_column(sa.Column("ocr_pages", sa.Text))
        batch.add_column(sa.Column("ocr_confidence", sa.Float))


def downgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.drop_column("ocr_confidence")
        batch.drop_column("ocr_pages")
