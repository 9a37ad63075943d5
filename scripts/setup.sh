#!/usr/bin/env bash
# Creates .venv and installs the pinned stack in the order that keeps torch a CPU build.
# Usage: scripts/setup.sh [--test]   (--test adds the test tools)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
# This machine's pip config names local index folders that may be absent; pip warns once per
# package about them. Keep those lines out of the way, keep every other message.
exec 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
python -m pip install -q --upgrade pip
# torch first: an unpinned torch pulled in by another package would be a multi-GB CUDA build.
python -m pip install -q "torch==2.13.0"
python -m pip install -q -r requirements.txt
# setuptools warns at length that an editable install may be shadowed by same-named folders of
# the working directory (it is the repository itself): not for the first screen
PYTHONWARNINGS="ignore:Editable installation" python -m pip install -q -e . --no-deps
if [[ "${1:-}" == "--test" ]]; then
  python -m pip install -q -r requirements-test.txt
fi
