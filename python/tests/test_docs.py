"""docs/embedding/python.md is what runs: its ```python blocks, as one script, from a folder
where examples/ is the repository's, must run and pass their own asserts."""
import os
import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_python_page_runs(tmp_path, examples):
    page = (REPO / "docs" / "embedding" / "python.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    assert len(blocks) >= 3
    script = tmp_path / "page.py"
    script.write_text("\n".join(blocks))
    (tmp_path / "examples").symlink_to(examples)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, TYCHO_LOG_LEVEL="warning",
                                   PYTHONPATH=os.pathsep.join([str(REPO / "python"), os.environ.get("PYTHONPATH", "")])))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(1, 220, 197) complex64" in done.stdout
    assert "[(1, 2), (2, 2), (3, 3)]" in done.stdout
    assert "TYCHO_ERR_INVALID_ARGUMENT" in done.stdout
