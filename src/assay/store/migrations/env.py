"""Alembic environment: migrations run on the connection `Store.migrate` hands over, or on
`sqlalchemy.url` when run from the `alembic` command line."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from assay.store.models import Base

target_metadata = Base.metadata


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things in place; batch mode copies the table instead.
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    engine = create_engine(context.config.get_main_option("sqlalchemy.url") or "")
    with engine.begin() as fresh:
        _run(fresh)
