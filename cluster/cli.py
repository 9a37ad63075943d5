"""The ``tlm`` command line.

Each subcommand lives in its own module ``cluster/cmd_<name>.py`` that defines
``register(subparsers)``: it adds its parser and sets ``func`` (called with the parsed
arguments, returns an exit code). Keeping one module per command lets a reader find a
command by its name and keeps slow imports (TVM, Ray, torch) out of ``tlm --help``:
a command module imports heavy libraries inside its ``func``, never at module level.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
import warnings

import cluster


def build_parser() -> argparse.ArgumentParser:
    """The full parser, with every ``cmd_*`` module's subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="tlm",
        description="tlm-cluster: collect measured schedules, train a tensor language model, serve it.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(cluster.__path__), key=lambda m: m.name):
        if info.name.startswith("cmd_"):
            importlib.import_module(f"cluster.{info.name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tlm`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # torch.export's pytree warns on every model import (a torch-internal deprecation): noise
    # for a person watching a collection, so it is silenced here, not in the library code.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*", category=FutureWarning)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted: everything measured so far is kept; run the same command to resume",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
