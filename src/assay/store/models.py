"""The tables: async jobs, published detections, and one row per instruction verdict.

Timestamps are naive UTC datetimes: SQLite has no time zone type, and one convention for every
backend keeps comparisons simple.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    """Now, as a naive UTC datetime (the convention of every timestamp column)."""
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    """Declarative base of Assay's tables."""


class JobState(enum.StrEnum):
    """Life of an async job: queued -> running -> done | failed (running may go back to
    queued when its worker died and the lease expired)."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class Job(Base):
    """One accepted `async_mode` request item, waiting for or finished by the worker.

    request: the validated request item as JSON.
    attempts: how many times a worker has claimed it; `lease_expires_at` bounds each claim,
        so a job whose worker was killed is claimed again once the lease runs out.
    result: the detector results (same JSON as a synchronous response item) once done.
    """

    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    state: Mapped[str] = mapped_column(String(16), index=True, default=JobState.QUEUED.value)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    application_name: Mapped[str] = mapped_column(String(200))
    model_name: Mapped[str] = mapped_column(String(200))
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class Detection(Base):
    """One detector's published result for one request item.

    score: None when the detector failed under `ignore_failures` (then `error` says why).
    job_id: the async job that produced it, if any (at most one set of rows per job).
    request_id: groups the detections of one request item.
    """

    __tablename__ = "detections"
    # At most one row per detector of an item, even with several servers on one database.
    __table_args__ = (
        Index("uq_detections_request_detector", "request_id", "detector", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    request_id: Mapped[str] = mapped_column(String(36), index=True)
    application_name: Mapped[str] = mapped_column(String(200), index=True)
    model_name: Mapped[str] = mapped_column(String(200))
    detector: Mapped[str] = mapped_column(String(100), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow, index=True)
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    user_query: Mapped[str | None] = mapped_column(Text, nullable=True)
    generated_text: Mapped[str] = mapped_column(Text)
    context: Mapped[list[str]] = mapped_column(JSON)
    result: Mapped[dict[str, Any]] = mapped_column(JSON)
    job_id: Mapped[str | None] = mapped_column(
        String(36), ForeignKey("jobs.id"), nullable=True, index=True
    )
    instructions: Mapped[list[InstructionOutcome]] = relationship(
        back_populates="detection", cascade="all, delete-orphan"
    )


class InstructionOutcome(Base):
    """One instruction's verdict inside a detection, kept as a row so that "which instruction
    fails most" is a query rather than a scan of JSON."""

    __tablename__ = "instruction_outcomes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    detection_id: Mapped[int] = mapped_column(ForeignKey("detections.id"), index=True)
    application_name: Mapped[str] = mapped_column(String(200), index=True)
    detector: Mapped[str] = mapped_column(String(100))
    instruction: Mapped[str] = mapped_column(Text)
    label: Mapped[bool] = mapped_column(Boolean)
    follow_probability: Mapped[float] = mapped_column(Float)
    detection: Mapped[Detection] = relationship(back_populates="instructions")
