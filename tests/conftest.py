from pathlib import Path

import pytest

from train.datasets import DataError, resolve_data_dir


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared datasets (../shared/data or $ASKALIKE_DATA); tests on real files skip without."""
    try:
        return resolve_data_dir()
    except DataError as err:
        pytest.skip(f"real-data test needs the shared datasets: {err}")


def write_bytes(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path
