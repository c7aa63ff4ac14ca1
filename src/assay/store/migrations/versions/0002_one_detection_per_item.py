"""One detection per detector of an item, enforced by the database.

Several server processes may share one database: a job finished twice or a publish batch sent
to two replicas at once must not store a result twice, whatever the application code does.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "uq_detections_request_detector", "detections", ["request_id", "detector"], unique=True
    )


def downgrade() -> None:
    op.drop_index("uq_detections_request_detector", table_name="detections")
