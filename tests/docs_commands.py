#!/usr/bin/env python3
"""Runs the commands and code blocks of README.md and docs/*.md as a new user would.

Usage: docs_commands.py SOURCE_DIR BUILD_DIR [--list] [--only docs/PAGE.md]

Every ```sh / ```bash block is run line by line (a trailing backslash joins lines; `# ...`
comments are dropped) with bash in a scratch folder that looks like the checkout: `build`,
`examples`, `abi`, `sdk`, `scripts` and `docs` link to the real ones, and build/bin is first on
PATH, so `build/bin/tycho ...` and an installed `tycho ...` both work. ```python blocks run
with Debian's /usr/bin/python3 (numpy), ```toml blocks must parse, ```c / ```cpp blocks are
written to a file when the page says which (the marker below) and are compiled by the page's
own commands.

Markers (HTML comments, invisible on the rendered page), on the line before a block:
  <!-- docs-test: file NAME -->   the block is the content of NAME in the scratch folder
  <!-- docs-test: exits N -->     the commands of the block exit with status N (the page says so)
  <!-- docs-test: prints -->      the block is what the previous command block prints: every
                                  line of it must appear, in order, in that block's stdout +
                                  stderr; numbers may differ, "..." stands for any text (and a
                                  line of only "..." for any lines)
Blocks and commands that cannot run in CI are listed in SKIP and SKIP_LINES below, each with
the reason. Pages under docs/embedding/ are run by their own tests. "/path/to/" on a page
stands for the reader's folder.
A command that exits non-zero fails the test, naming the page, the line and the output.
"""
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

# (page, text the block starts with) -> why it cannot run here.
SKIP = {
    ("docs/plugin-guide.md", ""): "its walk-through is built and run by the out-of-tree plugin test "
                                  "(sdk-install); fragments of headers and CMake signatures do not run",
}
# Commands (by how they start) that cannot run in CI, whichever block they are in.
SKIP_LINES = {
    "scripts/run-example": "installs packages and builds: its steps are the other blocks",
    "scripts/install-deps": "installs Debian packages (root, network)",
    "scripts/build": "rebuilds the tree this test runs in",
    "scripts/test": "runs the whole suite, this test included",
    "scripts/fuzz-short": "builds an instrumented tree with clang (minutes): scripts/test runs it after the suite",
    "scripts/sanitize-tests": "builds an instrumented tree with clang (minutes): scripts/test runs it after the suite",
    "python3 -m venv": "makes a venv in the reader's home: Python.Wheel installs the wheel in a fresh venv",
    "pip install": "builds the wheel (minutes, PyPI): Python.Wheel and Python.PipInstallOffline run these installs",
    "mpirun -np 2 build/bin/tycho reconstruct examples/mos2.toml":
        "Open MPI refuses root without --allow-run-as-root (CI runs as root); test_parallel runs 2 ranks",
}
LANGS_RUN = {"sh", "bash", "shell"}
SKIPPED = object()


def pages(source: Path, only=None):
    for p in [source / "README.md"] + sorted((source / "docs").glob("*.md")):
        if only is None or str(p.relative_to(source)) == only:
            yield p


def blocks(text: str):
    """(line number, language, body, marker) of every fenced block."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, lang = i + 1, m.group(1)
        marker = ""
        if i > 0:
            mm = re.match(r"^<!-- docs-test: (.*?) -->$", lines[i - 1].strip())
            if mm:
                marker = mm.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        yield start, lang, "\n".join(lines[i + 1:j]), marker
        i = j + 1


def commands(body: str):
    """The block's command lines: continuation lines joined, comments and blank lines dropped."""
    out, cur = [], ""
    for raw in body.split("\n"):
        line = raw.rstrip()
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        # A trailing comment (two spaces and #) is the page's explanation.
        out.append(re.sub(r"\s{2,}#.*$", "", cur).strip())
        cur = ""
    return out


NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


def line_pattern(expected: str):
    expected = expected.replace("/path/to/", ".../")  # the page's stand-in for the reader's folder
    parts = re.split(r"(\.\.\.|" + NUMBER + ")", expected)
    rx = ""
    for k, p in enumerate(parts):
        if k % 2 == 1:
            rx += ".*" if p == "..." else NUMBER
        else:
            rx += re.escape(p)
    return re.compile("^" + rx + "$")


def check_prints(expected: str, output: str):
    """None when every expected line appears in order, else the first line missing."""
    got = [l.rstrip() for l in output.replace("\r", "\n").split("\n")]
    pos = 0
    for want in expected.split("\n"):
        want = want.rstrip()
        if not want or want == "...":
            continue
        rx = line_pattern(want)
        while pos < len(got) and not rx.match(got[pos]):
            pos += 1
        if pos == len(got):
            return want
        pos += 1
    return None


def main():
    source, build = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    listing = "--list" in sys.argv
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None  # one page, while editing it
    work = Path(tempfile.mkdtemp(prefix="tycho_docs_"))
    for name in ("examples", "abi", "sdk", "scripts", "docs", "bench"):
        (work / name).symlink_to(source / name)
    (work / "build").symlink_to(build)
    env = dict(os.environ)
    env["PATH"] = f"{build / 'bin'}:/usr/bin:{env.get('PATH', '')}"
    env.pop("TYCHO_PLUGIN_PATH", None)
    # The README's Python lines as after `pip install ./python`: the package from the checkout,
    # libtycho from this build.
    env["PYTHONPATH"] = f"{source / 'python'}:{env.get('PYTHONPATH', '')}"
    env["TYCHO_LIBRARY"] = str(build / "lib" / "libtycho.so")
    failures, ran, skipped = [], 0, 0
    done = {}  # command -> output: a command repeated on several pages runs once
    for page in pages(source, only):
        rel = str(page.relative_to(source))
        last_output = None
        for line, lang, body, marker in blocks(page.read_text()):
            where = f"{rel}:{line}"
            first = body.strip().split("\n")[0] if body.strip() else ""
            reason = next((r for (p, start), r in SKIP.items() if p == rel and first.startswith(start)), None)
            if reason:
                skipped += 1
                last_output = SKIPPED  # and what the page says it prints is not checked either
                if listing:
                    print(f"skip {where}: {reason}")
                continue
            if marker.startswith("file "):
                (work / marker[5:].strip()).write_text(body + "\n")
                continue
            if marker == "prints":
                if last_output is SKIPPED:
                    continue
                if last_output is None:
                    failures.append(f"{where}: a 'prints' block with no command block before it")
                elif (missing := check_prints(body, last_output)) is not None:
                    failures.append(f"{where}: the page says the command prints\n    {missing}\n"
                                    f"  it printed:\n{last_output[-3000:]}")
                continue
            if lang == "toml":
                try:
                    tomllib.loads(body)
                except tomllib.TOMLDecodeError as e:
                    failures.append(f"{where}: TOML does not parse: {e}")
                continue
            if lang == "python":
                if listing:
                    print(f"run  {where}: python block")
                    continue
                ran += 1
                r = subprocess.run(["/usr/bin/python3", "-c", body], cwd=work, env=env, capture_output=True,
                                   text=True, timeout=600)
                last_output = r.stdout + r.stderr
                if r.returncode != 0:
                    failures.append(f"{where}: python block exited {r.returncode}:\n{last_output[-3000:]}")
                continue
            if lang not in LANGS_RUN:
                continue
            output = ""
            want_code = int(marker[6:]) if marker.startswith("exits ") else 0
            for cmd in commands(body):
                why = next((r for start, r in SKIP_LINES.items() if cmd.startswith(start)), None)
                if why:
                    skipped += 1
                    if listing:
                        print(f"skip {where}: {cmd}: {why}")
                    continue
                if listing:
                    print(f"run  {where}: {cmd}")
                    continue
                ran += 1
                if cmd not in done:
                    r = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, capture_output=True, text=True,
                                       timeout=600)
                    done[cmd] = (r.returncode, r.stdout + r.stderr)
                code, out = done[cmd]
                output += out
                if code != want_code:
                    failures.append(f"{where}: `{cmd}` exited {code}, expected {want_code}:\n{out[-3000:]}")
            last_output = output
    print(f"docs: {ran} commands and blocks run, {skipped} skipped (reasons: --list), {len(failures)} failed")
    for f in failures:
        print("FAILED " + f + "\n")
    subprocess.run(["rm", "-rf", str(work)])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
