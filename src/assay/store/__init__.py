"""Durable storage: published detections and async jobs (SQLAlchemy 2, migrated by Alembic)."""

from __future__ import annotations

from assay.store.models import Base, Detection, InstructionOutcome, Job, JobState
from assay.store.session import DATABASE_URL_ENV, DEFAULT_DATABASE_URL, Store

__all__ = [
    "DATABASE_URL_ENV",
    "DEFAULT_DATABASE_URL",
    "Base",
    "Detection",
    "InstructionOutcome",
    "Job",
    "JobState",
    "Store",
]
