"""The language's one error type: what could not be expressed, and where."""
from __future__ import annotations


class LanguageError(ValueError):
    """A trace or sentence the language cannot express, at ``position``.

    ``position`` is a word index for a sentence and an instruction index for a trace.
    """

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"position {position}: {reason}")
        self.position = position
        self.reason = reason
