"""Storage gives the same answers on SQLite and PostgreSQL: migrations, byte-exact results,
and one detection per detector of an item, enforced by the database."""

from __future__ import annotations

import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError

from assay.schema import DetectRequestItem
from assay.store import Detection, Store
from assay.store.detections import add_detections
from assay.store.session import MIGRATIONS
from conftest import both_backends

# Floats that print with 17 digits, text beyond ASCII, and key order that is not sorted: what a
# backend could change on the way through (jsonb would reorder keys; a float column could round).
RESULT = {
    "output_relevance": {
        "score": 0.3333333333333333,
        "instructions_list": [
            {
                "label": False,
                "instruction": "Response should directly address the core intent.",
                "follow_probability": 0.1234,
                "explanation": "Quotes «naïve» text — and 😀 emoji.",
            }
        ],
    }
}


def _item() -> DetectRequestItem:
    return DetectRequestItem.model_validate(
        {
            "user_query": "Où est la gare ?",
            "generated_text": "La gare est à 300 m, près du café.",
            "context": ["Plan du quartier", "Horaires 😀"],
            "config": {"output_relevance": {}},
            "publish": True,
            "application_name": "app",
            "model_name": "m",
        }
    )


@both_backends
def test_results_come_back_byte_identical(database_url: str) -> None:
    store = Store(database_url)
    store.migrate()
    with store.transaction() as session:
        add_detections(session, _item(), RESULT, request_id="r-1")
    with store.reading() as session:
        stored = session.execute(select(Detection)).scalar_one()
    assert json.dumps(stored.result) == json.dumps(RESULT["output_relevance"])
    assert stored.score == 0.3333333333333333
    assert stored.context == ["Plan du quartier", "Horaires 😀"]
    assert stored.generated_text == "La gare est à 300 m, près du café."


@both_backends
def test_a_detection_stored_twice_is_refused_by_the_database(database_url: str) -> None:
    store = Store(database_url)
    store.migrate()
    with store.transaction() as session:
        add_detections(session, _item(), RESULT, request_id="r-1", job_id=None)
    with pytest.raises(IntegrityError), store.transaction() as session:
        add_detections(session, _item(), RESULT, request_id="r-1", job_id=None)
    with store.reading() as session:
        assert len(session.execute(select(Detection.id)).all()) == 1


@both_backends
def test_migrations_upgrade_a_database_holding_data(database_url: str) -> None:
    # A database made by the first release, with rows in it, upgraded by a newer server.
    store = Store(database_url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with store.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0001")
    with store.transaction() as session:
        add_detections(session, _item(), RESULT, request_id="r-1")
    # The first release could store an item twice (a job finished twice): 0002 keeps one.
    with store.transaction() as session:
        add_detections(session, _item(), RESULT, request_id="r-1")
        add_detections(session, _item(), RESULT, request_id="r-2")
    store.migrate()
    store.migrate()  # and again: nothing to do
    with store.reading() as session:
        version = session.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        ids = session.execute(select(Detection.id, Detection.request_id)).all()
        outcomes = session.execute(text("SELECT DISTINCT detection_id FROM instruction_outcomes"))
        assert sorted(request for _, request in ids) == ["r-1", "r-2"]
        assert {row[0] for row in outcomes} == {detection for detection, _ in ids}
    assert version == "0002"


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_sqlite_database_is_refused(url: str) -> None:
    # Each connection saw its own empty database: a publish answered 200, the next "no such
    # table", and nothing outlived the process.
    with pytest.raises(ValueError, match="is an in-memory database, which nothing outlives"):
        Store(url)


def test_a_sqlite_file_with_tables_of_its_own_is_refused_and_left_as_it_was(
    tmp_path: Path,
) -> None:
    path = tmp_path / "theirs.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE detections (x)")
    connection.close()
    before = path.read_bytes()
    with pytest.raises(ValueError, match=r"holds tables Assay did not make \(detections\)"):
        Store(f"sqlite:///{path}").migrate()
    # Byte for byte: it was switched to SQLite's write-ahead log before being refused.
    assert path.read_bytes() == before
    with sqlite3.connect(path) as connection:  # no half-built schema left behind
        names = connection.execute("SELECT name FROM sqlite_master").fetchall()
    assert names == [("detections",)]


def test_a_database_from_a_newer_assay_says_so(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'assay.db'}"
    Store(url).migrate()
    with sqlite3.connect(tmp_path / "assay.db") as connection:
        connection.execute("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(ValueError, match="it was written by a newer Assay"):
        Store(url).migrate()


def test_servers_starting_together_on_a_new_sqlite_file_both_migrate(tmp_path: Path) -> None:
    # One of two stopped with "table jobs already exists" (3 times in 18).
    for attempt in range(8):
        url = f"sqlite:///{tmp_path / f'race-{attempt}.db'}"
        with ThreadPoolExecutor(max_workers=3) as pool:
            done = list(pool.map(lambda same: Store(same).migrate(), [url] * 3))
        assert done == [None, None, None]
        with Store(url).reading() as session:
            assert session.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 1


def test_another_process_reading_a_sqlite_file_loses_none_of_the_server_s_writes(
    tmp_path: Path,
) -> None:
    # The migration lock was taken on the database file itself; closing it dropped SQLite's own
    # locks, so a process that opened and closed the file deleted the server's write-ahead log,
    # and rows answered 200 were gone after a restart.
    import subprocess
    import sys

    database = tmp_path / "assay.db"
    store = Store(f"sqlite:///{database}")
    store.migrate()

    def count_elsewhere() -> int:
        script = (
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
            "print(c.execute('SELECT count(*) FROM probe').fetchone()[0]); c.close()"
        )
        found = subprocess.run(
            [sys.executable, "-c", script, str(database)], capture_output=True, text=True
        )
        assert found.returncode == 0, found.stderr
        return int(found.stdout)

    with store.transaction() as session:
        session.execute(text("CREATE TABLE probe (n INTEGER)"))
        session.execute(text("INSERT INTO probe VALUES (1)"))
    assert count_elsewhere() == 1
    with store.transaction() as session:
        session.execute(text("INSERT INTO probe VALUES (2)"))
    assert count_elsewhere() == 2
    store.close()
    assert count_elsewhere() == 2
