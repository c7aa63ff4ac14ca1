"""Initial schema: jobs, detections, instruction outcomes.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("lease_expires_at", sa.DateTime, nullable=True),
        sa.Column("application_name", sa.String(200), nullable=False),
        sa.Column("model_name", sa.String(200), nullable=False),
        sa.Column("request", sa.JSON, nullable=False),
        sa.Column("result", sa.JSON, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=False),
        sa.Column("finished_at", sa.DateTime, nullable=True),
    )
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_table(
        "detections",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("request_id", sa.String(36), nullable=False),
        sa.Column("application_name", sa.String(200), nullable=False),
        sa.Column("model_name", sa.String(200), nullable=False),
        sa.Column("detector", sa.String(100), nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("score", sa.Float, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("user_query", sa.Text, nullable=True),
        sa.Column("generated_text", sa.Text, nullable=False),
        sa.Column("context", sa.JSON, nullable=False),
        sa.Column("result", sa.JSON, nullable=False),
        sa.Column("job_id", sa.String(36), sa.ForeignKey("jobs.id"), nullable=True),
    )
    for column in ("request_id", "application_name", "detector", "created_at", "job_id"):
        op.create_index(f"ix_detections_{column}", "detections", [column])
    op.create_table(
        "instruction_outcomes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("detection_id", sa.Integer, sa.ForeignKey("detections.id"), nullable=False),
        sa.Column("application_name", sa.String(200), nullable=False),
        sa.Column("detector", sa.String(100), nullable=False),
        sa.Column("instruction", sa.Text, nullable=False),
        sa.Column("label", sa.Boolean, nullable=False),
        sa.Column("follow_probability", sa.Float, nullable=False),
    )
    op.create_index(
        "ix_instruction_outcomes_detection_id", "instruction_outcomes", ["detection_id"]
    )
    op.create_index(
        "ix_instruction_outcomes_application_name", "instruction_outcomes", ["application_name"]
    )


def downgrade() -> None:
    op.drop_table("instruction_outcomes")
    op.drop_table("detections")
    op.drop_table("jobs")
