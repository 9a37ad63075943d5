"""Helpers shared by the whole suite, one module per kind (fixtures stay in the conftest files):

* :mod:`.workloads` - small hand-made TE workloads and Tasks (TVMScript text as a client sends it)
* :mod:`.language`  - sampled traces and the round-trip checks of the tensor language
* :mod:`.corpora`   - a corpus of records measured on a fixed Zen 4, and sentence sets built from it
* :mod:`.records`   - synthetic storage records and index consistency checks (test data, not
  measurements; imported by worker subprocesses too)
* :mod:`.pg`        - a fresh PostgreSQL database per test
"""
from __future__ import annotations

import os
from pathlib import Path

#: The repository root: a test's subprocess imports ``tests.helpers`` from here.
REPO = Path(__file__).resolve().parents[2]


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for a test's ``python -c`` subprocess run in another directory: this one's,
    with the repository root on ``PYTHONPATH`` (so ``tests.helpers`` imports) and ``extra``."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)
