"""``python -m teachkit.bench SUBCOMMAND ...``: hand the arguments to the subcommand's module."""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS = {
    "softmax": "teachkit.bench.softmax",
    "ceilings": "teachkit.bench.softmax",
    "traffic": "teachkit.traffic",
    "attention": "teachkit.bench.attention",
    "decode": "teachkit.bench.decode",
    "host": "teachkit.bench.host",
}


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m teachkit.bench SUBCOMMAND [options]``; ``-h`` after it lists its options."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in SUBCOMMANDS:
        print("usage: python -m teachkit.bench {" + ",".join(SUBCOMMANDS) + "} [options]",
              file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[argv[0]])
    # softmax and ceilings share one parser, which takes the subcommand itself
    return module.main(argv if argv[0] in ("softmax", "ceilings") else argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
