"""``python -m tycho reconstruct CONFIG``: the ``tycho`` command's main job from Python."""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from .errors import TychoError
from .session import reconstruct


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tycho", description="tycho from Python (libtycho's C API)")
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("reconstruct", help="reconstruct object and probe from a TOML config")
    rec.add_argument("config", help="TOML configuration file")
    rec.add_argument("--iterations", type=int, default=0, help="iterations to run; sets [reconstruct] iterations, as for the tycho command")
    rec.add_argument("--output", "-o", default=None, help="result file (default: [output] path)")
    rec.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config value: --set reconstruct.batch_size=64")
    rec.add_argument("--quiet", "-q", action="store_true", help="no progress")
    args = parser.parse_args(argv)
    try:
        path = reconstruct(args.config, iterations=args.iterations, output=args.output, overrides=args.overrides,
                           progress=False if args.quiet else True)
    except (TychoError, OSError) as e:
        print(f"tycho: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130  # 128 + SIGINT, as the command; reconstruct() said what it saved
    if path is not None:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
