"""The ``tlm`` command line.

Each command lives in its own module here, named after it (``collect.py`` is ``tlm collect``),
which defines ``register(subparsers)``: it adds its parser and sets ``func`` (called with the
parsed arguments, returns an exit code). One module per command lets a reader find a command by
its name and keeps slow imports (TVM, Ray, torch) out of ``tlm --help``: a command module
imports heavy libraries inside its ``func``, never at module level. What the commands share
(``--corpus``/``--index-url`` and their environment defaults, :class:`UsageError`) is in
:mod:`cluster.cli.options`; a :class:`UsageError` is caught here, once.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys
import traceback
import warnings

from cluster.cli.options import UsageError

#: The commands, in the order ``tlm --help`` lists them (a module of this package each).
COMMANDS = ("collect", "corpus", "runs", "dataset", "train", "cost_model", "models", "serve", "compile", "adapt", "demo",
            "node_resources")


def build_parser() -> argparse.ArgumentParser:
    """The full parser, with every command's subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="tlm",
        description="tlm-cluster: collect measured schedules, train a tensor language model, serve it.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging; tracebacks of errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"cluster.cli.{name}").register(sub)
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
    if not args.verbose:
        # MetaSchedule logs at INFO what a user does not act on: its per-iteration tables while
        # tuning, and on a CPU with VNNI one "The workload cannot be tensorized" per float task
        # whose design space is built (606 lines over a `tlm compile` of EfficientNet-B0). The
        # progress bars say enough; -v shows it all.
        logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if args.command is None else 2
    from collectors.host_load import BusyHost

    try:
        return int(args.func(args) or 0)
    except (UsageError, BusyHost) as exc:
        if args.verbose:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`tlm runs | head`): not an error of ours
        with contextlib.suppress(OSError, ValueError):  # and no second error when Python flushes at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("interrupted: everything measured so far is kept; run the same command to resume",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
