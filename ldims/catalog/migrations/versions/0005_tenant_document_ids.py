"""Document ids scoped per tenant: a document's key becomes ``tenant/id``, so two tenants may
hold the same id and no tenant can take, block or probe another's ids.

The index, the qmd lexicon and the vectors are keyed by it too: the index schema version
changed with this revision, so ``ldims serve`` (or ``ldims reindex``) rebuilds the index from
the catalog, and every document's vectors are marked missing so the embed stage stores them
again under the new keys.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("documents") as table:
        table.alter_column("id", type_=sa.String(160), existing_type=sa.String(64))
    op.execute(
        "UPDATE documents SET id = tenant || '/' || id, vectors_sha256 = NULL, "
        "vectors_model = NULL WHERE id NOT LIKE '%/%'"
    )


def downgrade() -> None:
    op.execute(
        "UPDATE documents SET id = substr(id, length(tenant) + 2), vectors_sha256 = NULL, "
        "vectors_model = NULL WHERE id LIKE '%/%'"
    )
    with op.batch_alter_table("documents") as table:
        table.alter_column("id", type_=sa.String(64), existing_type=sa.String(160))
