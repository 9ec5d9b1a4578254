"""The ``tycho`` command a wheel puts on the environment's PATH: runs the C++ command bundled in
the package (``tycho/bin/tycho``), replacing this process, so that arguments, signals (Ctrl-C
saves the last complete iteration) and the exit status are the command's own. The command finds
its plugins from its own folder (``tycho/lib/tycho/plugins``)."""
from __future__ import annotations

import os
import pathlib
import sys
from typing import List, Optional

BUNDLED = pathlib.Path(__file__).resolve().parent / "bin" / "tycho"


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not os.access(BUNDLED, os.X_OK):
        print(f"tycho: this install of the Python package has no bundled command ({BUNDLED} is missing): "
              "`pip install .` from the repository builds it; `pip install ./python` installs the bindings "
              "alone, whose command is the build's build/bin/tycho", file=sys.stderr)
        return 127
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(BUNDLED, [str(BUNDLED), *args])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
