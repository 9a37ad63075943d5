"""Errors the storage layer raises at its edge.

Each bad input gets one exception type whose message names the bad value, so a caller (or a
person reading a CLI error) knows what to fix without reading a traceback. All derive from
:class:`CorpusError`, and the input errors also from ``ValueError`` so generic handlers work.
"""
from __future__ import annotations


class CorpusError(Exception):
    """Base class of every error raised by ``storage``."""


class SchemaMismatch(CorpusError, ValueError):
    """Records given to ``append`` do not fit ``RECORD_SCHEMA`` (missing, unknown or mistyped column)."""


class BadHardwareKey(CorpusError, ValueError):
    """A hardware key does not match ``storage.schema.HARDWARE_KEY_RE``."""


class IndexUnavailable(CorpusError):
    """The SQL index URL cannot be opened (bad URL, missing driver, unreachable server, bad path)."""


class IndexVersionError(CorpusError):
    """The index was created by a newer version of this code; refusing to touch it."""
