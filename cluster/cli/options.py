"""What every ``tlm`` command shares: the corpus options and the one way a user's mistake ends.

``--corpus`` and ``--index-url`` mean the same in every command and default the same way: the
corpus is ``$TLM_CORPUS``, else ``./corpus``; its index is ``$TLM_INDEX_URL``, else the SQLite
file inside the corpus. So with a shared PostgreSQL URL in the environment, ``tlm collect``
writes the same index ``tlm train`` registers its models in.

A user's mistake (an unknown model, a bad key, a bad number, a missing directory) is raised as
:class:`UsageError` with a message naming the bad value and what is accepted; ``tlm``'s ``main``
catches it once, prints ``error: <message>`` and exits 2 (the traceback only with ``-v``).
"""
from __future__ import annotations

import argparse
import contextlib
import os
from typing import Any, Iterator

CORPUS_ENV = "TLM_CORPUS"
INDEX_URL_ENV = "TLM_INDEX_URL"
DEFAULT_CORPUS = "corpus"


class UsageError(Exception):
    """A mistake on the command line: ``main`` prints ``error: <message>`` and exits 2."""


def add_corpus_options(parser: argparse.ArgumentParser | Any, *, what: str = "corpus directory") -> None:
    """``--corpus`` and ``--index-url``, with the environment defaults of every command."""
    parser.add_argument("--corpus", default=None, metavar="DIR",
                        help=f"{what} (default: ${CORPUS_ENV}, else ./{DEFAULT_CORPUS})")
    parser.add_argument("--index-url", default=None, metavar="URL",
                        help=f"SQLAlchemy URL of its index (default: ${INDEX_URL_ENV}, else the SQLite file "
                             "inside the corpus)")


def corpus_root(args: argparse.Namespace) -> str:
    """The corpus the options name: ``--corpus``, else ``$TLM_CORPUS``, else ``./corpus``."""
    return args.corpus or os.environ.get(CORPUS_ENV) or DEFAULT_CORPUS


def index_url(args: argparse.Namespace) -> str | None:
    """The index the options name: ``--index-url``, else ``$TLM_INDEX_URL``, else None (SQLite in the corpus)."""
    return args.index_url or os.environ.get(INDEX_URL_ENV) or None


def corpus_exists(root: str) -> bool:
    """A URI root (its store says) or a directory that is there."""
    return "://" in root or os.path.isdir(root)


def existing_corpus(args: argparse.Namespace) -> str:
    """:func:`corpus_root`, which must exist (commands that read a corpus; UsageError otherwise)."""
    root = corpus_root(args)
    if not corpus_exists(root):
        raise UsageError(f"no corpus at {root!r} (pass --corpus DIR or set {CORPUS_ENV})")
    return root


def corpus_named(args: argparse.Namespace) -> bool:
    """Whether the user named a corpus (``--corpus`` or ``$TLM_CORPUS``) rather than the default."""
    return bool(args.corpus or os.environ.get(CORPUS_ENV))


def optional_corpus(args: argparse.Namespace) -> str | None:
    """For commands that can do without a corpus (compile, serve): the one named, which must
    exist when it was named (``--corpus`` or ``$TLM_CORPUS``); else ``./corpus`` if it exists."""
    if corpus_named(args):
        return existing_corpus(args)
    return DEFAULT_CORPUS if corpus_exists(DEFAULT_CORPUS) else None


def open_corpus(args: argparse.Namespace, *, create: bool = False) -> Any:
    """The ``storage.Corpus`` the options name; only a command that writes one may ``create`` it.
    A corpus or index that cannot be opened is the user's mistake (UsageError naming it)."""
    from storage import Corpus, CorpusError

    root = corpus_root(args) if create else existing_corpus(args)
    with user_errors(CorpusError):
        return Corpus.open(root, index_url=index_url(args))


@contextlib.contextmanager
def user_errors(*types: type[BaseException]) -> Iterator[None]:
    """Within: an error of these types, raised by the library on the user's input, is a UsageError
    with the library's own message (which names the value)."""
    try:
        yield
    except types as exc:
        raise UsageError(str(exc)) from exc


def at_least_one(flag: str, value: int | None) -> None:
    """A count option must be a whole number >= 1 (None: not given)."""
    if value is not None and value < 1:
        raise UsageError(f"{flag} must be a whole number >= 1, got {value}")


def comma_list(text: str) -> tuple[str, ...]:
    """A comma-separated option as its non-empty items (``"a, b,"`` -> ``("a", "b")``)."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def held_out_models(text: str) -> tuple[str, ...]:
    """The ``--held-out`` option: comma-separated model names, or ``none`` for no held-out model."""
    return () if text.strip() == "none" else comma_list(text)
