"""DESIGN.md section 2 holds: dependencies point one way, cluster → tlm → collectors → storage.

Read from the source (every ``import`` and ``from ... import`` statement, at any depth), so a
lazy import inside a function counts as much as one at the top of a module.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("storage", "collectors", "tlm", "cluster", "bench")
#: package -> the packages of ours it may import (a module of its own package is always fine).
ALLOWED = {
    "storage": set(),
    "collectors": {"storage"},
    "tlm": {"storage", "collectors"},
    "cluster": {"storage", "collectors", "tlm"},
    "bench": {"storage", "collectors", "tlm", "cluster"},
}
#: The only collectors modules tlm may import: hardware, tasks, sketches and the TVM glue, and
#: collectors.tuner for ``measure_schedules`` only: the generator's measure_top and the closed
#: loop measure generated schedules exactly as a search's candidates are measured (DESIGN.md's
#: table predates that; tlm never tunes).
TLM_FROM_COLLECTORS = {"collectors.hardware", "collectors.tasks", "collectors.sketches", "collectors.tir",
                       "collectors.tuner"}


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) of every absolute import in a file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # "from collectors import hardware" imports the module collectors.hardware
            out += [(node.lineno, f"{node.module}.{a.name}") if node.module in PACKAGES else (node.lineno, node.module)
                    for a in node.names]
    return out


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_point_one_way(package):
    bad = []
    for path in _sources(package):
        for line, mod in _imports(path):
            top = mod.split(".")[0]
            if top in PACKAGES and top != package and top not in ALLOWED[package]:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {package} imports {mod}")
            if package == "tlm" and top == "collectors" and ".".join(mod.split(".")[:2]) not in TLM_FROM_COLLECTORS:
                bad.append(f"{path.relative_to(ROOT)}:{line}: tlm imports {mod} (allowed: {sorted(TLM_FROM_COLLECTORS)})")
    assert not bad, "\n".join(bad)


def test_storage_does_not_import_tvm():
    """Storage is data only: every TVM-facing concept (interop included) lives in collectors."""
    bad = [f"{p.relative_to(ROOT)}:{line}: {mod}" for p in _sources("storage") for line, mod in _imports(p)
           if mod.split(".")[0] in ("tvm", "tvm_ffi")]
    assert not bad, "\n".join(bad)


def test_modules_stay_small():
    """One concept per module: a reader can hold it in their head (DESIGN.md section 9)."""
    big = [f"{p.relative_to(ROOT)}: {n} lines" for pkg in PACKAGES[:4] for p in _sources(pkg)
           if (n := len(p.read_text().splitlines())) > 460]
    assert not big, "\n".join(big)


def test_the_check_sees_a_bad_import(tmp_path):
    """The parser above is not blind: a lazy upward import is found."""
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from cluster.cli import main\n    from collectors import zoo\n")
    assert _imports(f) == [(2, "cluster.cli"), (3, "collectors.zoo")]
