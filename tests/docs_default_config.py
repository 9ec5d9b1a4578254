#!/usr/bin/env python3
"""Checks docs/default-config.toml against the code: usage: docs_default_config.py SOURCE BUILD

1. Every key has a comment on its line, and the file parses as TOML.
2. A run of the file (with the example's data path) and a run of a config that leaves every one
   of its keys out give the same loss history and object, bit for bit: the documented defaults
   are the ones tycho resolves. Every key is also accepted (an unknown key is refused).
"""
import re
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

source, build = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
page = source / "docs" / "default-config.toml"
text = page.read_text()
failures = []
tomllib.loads(text)
for n, line in enumerate(text.split("\n"), 1):
    if re.match(r"^\s*[A-Za-z_][A-Za-z0-9_]*\s*=", line) and not re.search(r"\s#\s", line):
        failures.append(f"{page}:{n}: key without a comment: {line.strip()}")

work = Path(tempfile.mkdtemp(prefix="tycho_defaults_"))
data = source / "examples" / "data" / "mos2_80kV_32x24_counts.h5"
(work / "defaults.toml").write_text(text)
(work / "minimal.toml").write_text("[data]\n")
# The same for both: the data, the example's defocus and grid origin, 3 iterations on 1 thread.
common = ["--set", f"data.path='{data}'", "--set", "optics.C10_A=-150.0", "--set",
          "preprocess.scan_origin_A=[17.0, 19.0]", "--set", "reconstruct.threads=1", "--iterations", "3",
          "-q", "--set", "output.previews=false"]
results = {}
for name in ("defaults", "minimal"):
    out = work / f"{name}.zip"
    r = subprocess.run([str(build / "bin" / "tycho"), "reconstruct", str(work / f"{name}.toml"), "-o", str(out)]
                       + common, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        failures.append(f"tycho reconstruct {name}.toml exited {r.returncode}:\n{r.stdout}{r.stderr}")
        continue
    with zipfile.ZipFile(out) as z:
        results[name] = {m: z.read(m) for m in ("object.npy", "probe.npy", "loss_history.npy")}
if len(results) == 2:
    for member in ("loss_history.npy", "object.npy", "probe.npy"):
        if results["defaults"][member] != results["minimal"][member]:
            failures.append(f"{member} differs between docs/default-config.toml and the code's defaults")
subprocess.run(["rm", "-rf", str(work)])
print(f"default-config: {len(failures)} problems")
for f in failures:
    print("FAILED " + f)
sys.exit(1 if failures else 0)
