#!/usr/bin/env python3
"""Reference values for tycho's detector-format readers, computed once with RosettaSciIO.

Reads every frame-holding file of ../shared/data/realformats/ (RosettaSciIO's public test data:
see its README.md) with RosettaSciIO 0.15 and writes tests/realformats/reference.json: per file,
the array's shape and dtype as RosettaSciIO returns them, its axes (scale, offset, units),
and the values as exact integer checksums in C order (sum, a position-weighted sum, the
maximum, the sum of each frame). tests/test_detector_formats.cpp reads the same files through
tycho's sources and compares. Rerun only when the shared files change:

    python3 -m venv /tmp/rsciio && /tmp/rsciio/bin/pip install 'rosettasciio==0.15.*' hdf5plugin
    /tmp/rsciio/bin/python tests/realformats/make_reference.py [path/to/shared/data/realformats]

Merlin files come in zip archives; they are extracted to a temporary folder (the member name is
the key). RosettaSciIO cannot read RAW (bit-packed) .mib files: those are recorded as such, and
the test checks tycho's RAW decoding against the processed acquisition beside each one.

With --generated DIR it also reads the small files the tests' own writers make (DM 4-D data,
several images in one file, DM3, EMPAD: formats the shared folder has no real file of), written
into DIR by

    TYCHO_WRITE_FORMAT_SAMPLES=DIR build/bin/tycho_tests --gtest_filter='*GeneratedFiles*'

and records RosettaSciIO's reading under "generated".
"""
import json
import os
import sys
import tempfile
import zipfile

import numpy as np
import rsciio
from rsciio.arina import file_reader as read_arina
from rsciio.digitalmicrograph import file_reader as read_dm
from rsciio.empad import file_reader as read_empad
from rsciio.quantumdetector import file_reader as read_mib

HERE = os.path.dirname(os.path.abspath(__file__))
WEIGHT_PERIOD = 1009  # weighted sum: sum of v[k] * (k % 1009 + 1) over the C-order index k


def checksums(data):
    a = np.asarray(data)
    flat = a.reshape(-1).astype(np.int64)
    weights = (np.arange(flat.size, dtype=np.int64) % WEIGHT_PERIOD) + 1
    frames = a.reshape((-1,) + a.shape[-2:]).astype(np.int64)
    return {
        "sum": int(flat.sum()),
        "weighted_sum": int((flat * weights).sum()),
        "max": int(flat.max()),
        "frame_sums": [int(f.sum()) for f in frames],
    }


def axes_of(axes):
    return [{"name": str(a.get("name", "")), "size": int(a["size"]), "scale": float(a.get("scale", 1.0)),
             "offset": float(a.get("offset", 0.0)), "units": str(a.get("units", "") or "")} for a in axes]


def entry(d):
    data = np.asarray(d["data"])
    return {"shape": list(data.shape), "dtype": str(data.dtype), "axes": axes_of(d["axes"]), **checksums(data)}


def generated(folder):
    out = {}
    for name in ("gen_4d.dm4", "gen_3d.dm3", "gen_multi.dm4"):
        out[name] = {"datasets": [dict(entry(d), title=d["metadata"]["General"]["title"])
                                  for d in read_dm(os.path.join(folder, name))]}
    (d,) = read_empad(os.path.join(folder, "gen_empad.xml"))
    out["gen_empad.xml"] = entry(d)
    return out


def main():
    args = sys.argv[1:]
    generated_dir = None
    if "--generated" in args:
        i = args.index("--generated")
        generated_dir = args[i + 1]
        del args[i:i + 2]
    folder = args[0] if args else os.path.join(HERE, "..", "..", "..", "shared", "data", "realformats")
    folder = os.path.abspath(folder)
    out = {"rosettasciio": rsciio.__version__, "numpy": np.__version__, "weight_period": WEIGHT_PERIOD, "files": {}}
    files = out["files"]
    with tempfile.TemporaryDirectory() as tmp:
        for z in sorted(f for f in os.listdir(folder) if f.endswith(".zip")):
            with zipfile.ZipFile(os.path.join(folder, z)) as archive:
                archive.extractall(os.path.join(tmp, z[:-4]))
                for member in sorted(archive.namelist()):
                    if not member.endswith(".mib"):
                        continue
                    key = f"{z}:{member}"
                    path = os.path.join(tmp, z[:-4], member)
                    try:
                        (d,) = read_mib(path)
                    except NotImplementedError as e:
                        files[key] = {"rosettasciio_refuses": str(e)}
                        continue
                    e = entry(d)
                    e["dwell_time_s"] = float(d["metadata"]["Acquisition_instrument"]["dwell_time"])
                    files[key] = e
    (d,) = read_arina(os.path.join(folder, "test_00_master.h5"))
    files["test_00_master.h5"] = entry(d)
    dm = read_dm(os.path.join(folder, "test-1.dm4"))
    files["test-1.dm4"] = {"datasets": [entry(d) for d in dm]}
    if generated_dir:
        out["generated"] = generated(generated_dir)
    else:  # keep the generated files' reference from the last run
        try:
            with open(os.path.join(HERE, "reference.json")) as f:
                out["generated"] = json.load(f)["generated"]
        except (OSError, KeyError):
            pass
    with open(os.path.join(HERE, "reference.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
