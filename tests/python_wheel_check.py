"""`pip wheel .` gives a wheel that installs into a fresh virtual environment (no system site
packages) and runs the example without the checkout: the `tycho` command on its PATH, `import
tycho` loading the wheel's own libtycho, which finds the wheel's plugins; the object equals the
build's `tycho reconstruct`, bit for bit.

The wheel is made from this build (-C cmake.define.TYCHO_WHEEL_FROM_BUILD=BUILD_DIR,
python/wheel_from_build.cmake): the real backend (scikit-build-core from PyPI) and the real
install rules, but no second compilation. `pip install .` compiling from scratch is measured by
hand (docs/embedding/python.md gives its time).

The checkout is hidden from the installed package: the example (config and data) is copied to
a temporary folder outside it, and the commands run there in a mount namespace where an empty
tmpfs covers the checkout (and BUILD_DIR, if outside it), with an environment that names no
path of it: as on a copy of the machine's image without the build tree. Where a mount namespace
cannot be made (not root), the run is not hidden and only the next check holds: no file of the
checkout is mapped into the Python process (/proc/self/maps), and libtycho came from the wheel.

usage: python3 python_wheel_check.py REPO BUILD_DIR
Exit 77 (ctest: skipped) when PyPI cannot be reached for the build tools.
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

import numpy as np

repo, build = (pathlib.Path(a).resolve() for a in sys.argv[1:3])
ITERATIONS = 3
work = pathlib.Path(tempfile.mkdtemp(prefix="tycho-wheel-check-"))  # outside the checkout
assert not str(work).startswith(str(repo)), f"the temporary folder {work} is inside the checkout"
clean_env = {k: v for k, v in os.environ.items()
             if not k.startswith(("TYCHO_", "PYTHON", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CMAKE_"))}
clean_env["TYCHO_LOG_LEVEL"] = "warning"
clean_env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"


def run(cmd, **kw):
    kw.setdefault("env", clean_env)
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done.stdout


def venv(name):
    path = work / name
    run([sys.executable, "-m", "venv", path])  # no --system-site-packages: nothing of Debian's
    return path / "bin"


started = time.monotonic()
tools = venv("venv-build")
probe = subprocess.run([tools / "pip", "download", "--no-deps", "-q", "-d", work / "probe", "scikit-build-core"],
                       capture_output=True, text=True, env=clean_env)
if probe.returncode != 0:
    print("PyPI cannot be reached (pip download scikit-build-core failed): skipped\n" + probe.stderr[-2000:])
    sys.exit(77)

# pip wheel . with build isolation: pip installs scikit-build-core from PyPI into its own
# environment. Its build folder is a temporary one (never the persistent build-wheel/).
wheels = work / "wheels"
run([tools / "pip", "wheel", "--no-deps", "-w", wheels,
     "--config-settings", f"cmake.define.TYCHO_WHEEL_FROM_BUILD={build}",
     "--config-settings", f"build-dir={work / 'wheel-build'}", repo])
(wheel,) = wheels.glob("tycho-*.whl")
names = zipfile.ZipFile(wheel).namelist()
for expected in ("tycho/__init__.py", "tycho/view.py", "tycho/lib/libtycho.so.1", "tycho/bin/tycho",
                 "tycho/lib/tycho/plugins/libtycho_plugin_cpu.so", "tycho/lib/tycho/plugins/libtycho_plugin_emd.so"):
    assert expected in names, f"{expected} is not in {wheel.name}: {names}"
assert not [n for n in names if n.startswith("tycho/include") or n.endswith(".a")], "development files in the wheel"
assert wheel.name.endswith("-py3-none-linux_x86_64.whl"), wheel.name
print(f"{wheel.name}: {wheel.stat().st_size / 1e6:.1f} MB, {len(names)} files "
      f"(made in {time.monotonic() - started:.0f} s)")

# A second fresh environment, the wheel and its dependencies (numpy, tomli-w) from PyPI.
bin_ = venv("venv-run")
run([bin_ / "pip", "install", "-q", wheel])
site = pathlib.Path(run([bin_ / "python", "-c", "import tycho, os; print(os.path.dirname(tycho.__file__))"]).strip())
for f in [site / "lib" / "libtycho.so.1", site / "bin" / "tycho", *sorted((site / "lib/tycho/plugins").glob("*.so"))]:
    dyn = run(["readelf", "-d", f])
    runpath = [l.split("[")[1].rstrip("]") for l in dyn.splitlines() if "RUNPATH" in l or "RPATH" in l]
    assert runpath and all(p.startswith("$ORIGIN") for p in runpath[0].split(":")), f"{f}: run path {runpath}"

# The example away from the checkout, which is hidden.
place = work / "elsewhere"
shutil.copytree(repo / "examples", place / "examples", ignore=shutil.ignore_patterns("*.zip", "*.png", "*.ipynb"))
env = dict(clean_env, PATH=f"{bin_}:{clean_env.get('PATH', '/usr/bin:/bin')}", HOME=str(place))
covered = [repo] + ([] if str(build).startswith(str(repo)) else [build])
mounts = " && ".join(f"mount -t tmpfs -o size=1m tycho-hidden '{p}'" for p in covered)
hiding = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                         f"{mounts} && test ! -e '{repo}/CMakeLists.txt'"], capture_output=True).returncode == 0


def away(cmd):
    """cmd run in the copy's folder with the checkout covered (when a mount namespace can be had)."""
    if not hiding:
        return run(cmd, cwd=place, env=env)
    return run(["unshare", "--mount", "--propagation", "private", "sh", "-c", f'{mounts} && exec "$@"', "sh",
                *cmd], cwd=place, env=env)


version = away(["tycho", "--version"]).strip()
assert version.startswith("tycho ") and "(ABI 1." in version, version
plugins = away(["tycho", "plugins"])
assert str(site / "lib/tycho/plugins") in plugins and "cpu" in plugins, plugins
away(["tycho", "reconstruct", "examples/mos2.toml", "--iterations", ITERATIONS, "--output", "cli.zip", "-q",
      "--set", "output.previews=false"])
script = ("import tycho\n"
          f"with tycho.Session('examples/mos2.toml', overrides=['reconstruct.iterations={ITERATIONS}']) as s:\n"
          "    s.run(progress=False)\n"
          "    s.save('py.zip', overwrite=True)\n"
          "    maps = open('/proc/self/maps').read()\n"
          f"assert {str(repo)!r} not in maps, [l for l in maps.splitlines() if {str(repo)!r} in l]\n"
          "print(tycho.library_path())\n")
loaded = away([bin_ / "python", "-c", script]).strip()
assert pathlib.Path(loaded) == site / "lib" / "libtycho.so.1", f"libtycho loaded from {loaded}"
py, cli = np.load(place / "py.zip"), np.load(place / "cli.zip")
assert py["object"].shape == (1, 220, 197) and not np.allclose(py["object"], 1)
for name in ("object", "probe", "loss_history"):
    assert py[name].tobytes() == cli[name].tobytes(), f"{name}: Python and the tycho command differ"
print(f"installed {wheel.name} into a fresh venv; `tycho --version`: {version}; the example ran from {place} "
      + ("with the checkout covered by an empty tmpfs" if hiding
         else "WITHOUT hiding the checkout (no mount namespace)")
      + f"; Python's object equals the command's bit for bit ({time.monotonic() - started:.0f} s in all)")
shutil.rmtree(work, ignore_errors=True)
