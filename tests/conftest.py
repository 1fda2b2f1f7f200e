from pathlib import Path

import pytest
from helpers import collection, index, make_tiny_model, write_jsonl

from askalike.core.data_dir import resolve_data_dir
from askalike.core.datasets import DataError

pytest_plugins = ["reliability_report"]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared datasets (../shared/data or $ASKALIKE_DATA); tests on real files skip without."""
    try:
        return resolve_data_dir()
    except DataError as err:
        pytest.skip(f"real-data test needs the shared datasets: {err}")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def steep_model(tmp_path_factory, tiny_model) -> Path:
    """The tiny model with a judge that calls only near-copies the same question (50% at cosine
    0.98): the untrained model's cosines of unrelated questions reach 0.5."""
    import shutil

    from askalike.retrieval.judgement import SameQuestionJudge, record_judge

    model = tmp_path_factory.mktemp("models") / "steep"
    shutil.copytree(tiny_model, model)
    record_judge(model, SameQuestionJudge(50.0, -49.0, "tests: 50% at cosine 0.98"))
    return model


@pytest.fixture
def built(tmp_path, tiny_model) -> tuple[Path, Path]:
    """An index of 200 questions (its own SQLite file) and its source."""
    source = write_jsonl(tmp_path / "questions.jsonl", collection(200))
    index(source, tmp_path / "index", tiny_model)
    return tmp_path / "index", source


POSTGRES_ADMIN_ENV = "ASKALIKE_TEST_POSTGRES"
POSTGRES_ADMIN_DEFAULT = "postgresql://postgres@127.0.0.1:5432/postgres"


@pytest.fixture
def postgres_url():
    """A fresh, empty PostgreSQL database for one test (dropped afterwards); the server comes
    from $ASKALIKE_TEST_POSTGRES or 127.0.0.1:5432 with trust auth."""
    import os
    import uuid

    psycopg = pytest.importorskip("psycopg", reason="PostgreSQL tests need psycopg (pip install .[dev])")
    admin = os.environ.get(POSTGRES_ADMIN_ENV, POSTGRES_ADMIN_DEFAULT)
    try:
        connection = psycopg.connect(admin, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as err:
        pytest.skip(f"no PostgreSQL server at {admin} ({str(err).strip()}); set {POSTGRES_ADMIN_ENV}")
    name = f"askalike_test_{uuid.uuid4().hex[:12]}"
    with connection:
        connection.execute(f'CREATE DATABASE "{name}"')
        host = connection.info.host
        port = connection.info.port
        user = connection.info.user
        try:
            yield f"postgresql+psycopg://{user}@{host}:{port}/{name}"
        finally:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path):
    """Each store test runs on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.sqlite3'}"
    return request.getfixturevalue("postgres_url")
