import os
import pathlib
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def golden_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("DS41_GOLDEN_DIR", ROOT / "golden"))


@pytest.fixture(scope="session")
def goldens() -> pathlib.Path:
    d = golden_dir()
    if not (d / "ds41_tiny_golden.json").exists():
        pytest.fail(f"no goldens at {d} (set DS41_GOLDEN_DIR)")
    return d


@pytest.fixture(scope="session")
def tiny(goldens):
    import ds41

    return ds41.Model.from_golden(goldens / "ds41_tiny_golden.json")


@pytest.fixture
def tmp_path():
    """A temporary directory removed after the test (pytest's own tmp_path keeps the last three
    runs' directories under /tmp/pytest-of-USER; the project's tests leave nothing behind)."""
    with tempfile.TemporaryDirectory(prefix="ds41-pytest-") as d:
        yield pathlib.Path(d)
