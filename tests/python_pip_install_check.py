"""`pip install --no-build-isolation ./python` works offline, and the installed package finds the
libtycho of the repository it was installed from without TYCHO_LIBRARY.

usage: python3 python_pip_install_check.py PYTHON_SOURCE TARGET_DIR BUILT_LIBTYCHO
"""
import os
import pathlib
import shutil
import subprocess
import sys

source, target, _built = (pathlib.Path(a) for a in sys.argv[1:4])
shutil.rmtree(target, ignore_errors=True)
# --no-index: nothing from the network; --no-deps: numpy and tomli-w come from the system.
subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-build-isolation", "--no-index", "--no-deps",
                "--target", str(target), str(source.resolve())], check=True)
recorded = (target / "tycho" / "_build_tree.py").read_text()
repo_lib = source.resolve().parent / "build" / "lib"
assert repr(str(repo_lib)) in recorded, recorded
print("installed; recorded build tree:", repo_lib)

if not (repo_lib / "libtycho.so").exists():
    print(f"this build is not {repo_lib}: the import check needs TYCHO_LIBRARY, skipped")
    sys.exit(0)
env = {k: v for k, v in os.environ.items() if k not in ("TYCHO_LIBRARY", "PYTHONPATH")}
env["PYTHONPATH"] = str(target)
done = subprocess.run([sys.executable, "-c", "import tycho; print(tycho.version()); print(tycho.library_path())"],
                      env=env, cwd="/", capture_output=True, text=True)
assert done.returncode == 0, done.stderr
version, path = done.stdout.split()
assert version == "0.1.0" and pathlib.Path(path) == repo_lib / "libtycho.so", done.stdout
print("import tycho from the install found", path)
