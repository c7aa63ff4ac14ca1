"""One detection per detector of an item, enforced by the database.

Several server processes may share one database: a job finished twice or a publish batch sent
to two replicas at once must not store a result twice, whatever the application code does.
Copies stored before this revision are removed first (the earliest of each is kept).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


#: Every detection but the first stored for its (request_id, detector): the copies a job
#: finished twice or a batch published twice left before this index existed.
_LATER_COPIES = (
    "SELECT id FROM detections AS d WHERE EXISTS (SELECT 1 FROM detections AS e "
    "WHERE e.request_id = d.request_id AND e.detector = d.detector AND e.id < d.id)"
)


def upgrade() -> None:
    # The copies are identical results of one item, so the first is kept and the rest (with
    # their instruction outcomes) removed; otherwise the unique index could not be built.
    op.execute(sa.text(f"DELETE FROM instruction_outcomes WHERE detection_id IN ({_LATER_COPIES})"))
    op.execute(sa.text(f"DELETE FROM detections WHERE id IN ({_LATER_COPIES})"))
    op.create_index(
        "uq_detections_request_detector", "detections", ["request_id", "detector"], unique=True
    )


def downgrade() -> None:
    op.drop_index("uq_detections_request_detector", table_name="detections")
