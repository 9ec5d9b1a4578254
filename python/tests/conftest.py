"""Where the tests find this build: set by tests/python.cmake (ctest), or by hand:

    TYCHO_LIBRARY=build/lib/libtycho.so TYCHO_CLI=build/bin/tycho PYTHONPATH=python \\
        python3 -m pytest python/tests
"""
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def examples() -> pathlib.Path:
    return pathlib.Path(os.environ.get("TYCHO_EXAMPLES", REPO / "examples"))


@pytest.fixture(scope="session")
def mos2(examples) -> pathlib.Path:
    return examples / "mos2.toml"


@pytest.fixture(scope="session")
def cli() -> str:
    path = os.environ.get("TYCHO_CLI", str(REPO / "build" / "bin" / "tycho"))
    assert os.path.exists(path), f"the tycho command '{path}' does not exist (set TYCHO_CLI)"
    return path


@pytest.fixture(scope="session")
def cli_result(cli, mos2, tmp_path_factory) -> pathlib.Path:
    """The result of `tycho reconstruct examples/mos2.toml --iterations 3` (no previews)."""
    out = tmp_path_factory.mktemp("cli") / "cli.zip"
    subprocess.run([cli, "reconstruct", str(mos2), "--iterations", "3", "--output", str(out), "-q",
                    "--set", "output.previews=false"], check=True)
    return out
