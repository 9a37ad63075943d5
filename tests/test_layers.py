"""The rooms of the code and the seams between them (docs/ARCHITECTURE.md), held by the source.

* dependencies point one way: ``cluster → tlm → collectors → storage`` (``bench`` may use all);
* inside ``tlm`` the three rooms point one way too: ``service → model → language``; the
  language needs no torch, transformers or tokenizers (it runs wherever TVM does);
* only ``cluster/`` imports Ray; ``storage/`` imports no TVM;
* no import circle anywhere, between modules of any package.

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
#: The only collectors modules tlm may import: hardware, tasks, sketches and the TVM glue, the
#: zoo's list of held-out models, the hardware key's cost model (the generator ranks with it),
#: and collectors.tuner: the generator and the closed loop measure generated schedules exactly
#: as a search's candidates are measured, and the model-seeded search (tlm/service/seeded.py)
#: hands its measured candidates to MetaSchedule's search (tlm never runs a search of its own);
#: collectors.layout: the API tells a deployer which inputs a schedule reads in another layout;
#: collectors.fast_import: the dataset build's sampling processes load the CPU intrinsics alone,
#: as every CPU tuning process does; collectors.rules: the generator ranks the rule baseline's
#: program beside the model's, so the served top-1 never loses to it by the cost model's reckoning;
#: collectors.threads: healthy decoding and the whole-model compile write a parallel loop only where
#: starting one pays, by the same estimate the rules use; collectors.host_load: decoding takes
#: one thread while anything measures on the host, every core otherwise; collectors.block_axes and
#: collectors.blocking: healthy decoding splits a task for the cores where each chunk reads least
#: again, by the rules' own measure of it (``rereads``) and the L2 size; collectors.op_kinds: the API reads a posted
#: subgraph's op kind from its program, as extraction does.
TLM_FROM_COLLECTORS = {"collectors.hardware", "collectors.tasks", "collectors.op_kinds", "collectors.sketches", "collectors.tir",
                       "collectors.tuner", "collectors.zoo", "collectors.cost_model",
                       "collectors.layout", "collectors.fast_import", "collectors.rules", "collectors.threads",
                       "collectors.host_load", "collectors.blocking", "collectors.block_axes"}
#: tlm's rooms, lowest first: a room may import the rooms below it, never one above.
TLM_ROOMS = ("tlm.language", "tlm.model", "tlm.service")
#: What the language must run without (it is TVM only).
NOT_IN_LANGUAGE = ("torch", "transformers", "tokenizers", "safetensors", "peft")


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


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(module: str) -> str | None:
    return next((r for r in TLM_ROOMS if module == r or module.startswith(r + ".")), None)


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


def test_tlm_is_three_rooms_that_point_one_way():
    """Every tlm module lives in a room; language imports no model or service, model no service."""
    homeless = [str(p.relative_to(ROOT)) for p in _sources("tlm") if p.name != "__init__.py" or p.parent.name != "tlm"
                if _room(_module(p)) is None]
    assert not homeless, f"tlm modules outside tlm/language, tlm/model, tlm/service: {homeless}"
    bad = []
    for path in _sources("tlm"):
        here = _room(_module(path))
        for line, mod in _imports(path):
            there = _room(mod)
            if here and there and TLM_ROOMS.index(there) > TLM_ROOMS.index(here):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {here} imports {mod}")
    assert not bad, "\n".join(bad)


def test_the_language_needs_no_torch():
    bad = [f"{p.relative_to(ROOT)}:{line}: {mod}" for p in _sources("tlm/language") for line, mod in _imports(p)
           if mod.split(".")[0] in NOT_IN_LANGUAGE]
    assert not bad, "\n".join(bad)


def test_only_cluster_imports_ray():
    bad = [f"{p.relative_to(ROOT)}:{line}: {mod}" for pkg in PACKAGES if pkg != "cluster" for p in _sources(pkg)
           for line, mod in _imports(p) if mod.split(".")[0] == "ray"]
    assert not bad, "\n".join(bad)


def test_storage_does_not_import_tvm():
    """Storage is data only: every TVM-facing concept (interop included) lives in collectors."""
    bad = [f"{p.relative_to(ROOT)}:{line}: {mod}" for p in _sources("storage") for line, mod in _imports(p)
           if mod.split(".")[0] in ("tvm", "tvm_ffi")]
    assert not bad, "\n".join(bad)


def _import_graph() -> dict[str, set[str]]:
    """module -> the modules of ours it imports (a ``from pkg.mod import name`` is pkg.mod)."""
    modules = {_module(p): p for pkg in PACKAGES for p in _sources(pkg)}

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    return {m: {r for _, name in _imports(p) if (r := resolve(name)) and r != m} for m, p in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_no_import_circle_anywhere():
    assert _circles(_import_graph()) == []


def test_modules_stay_small():
    """One concept per module: a reader can hold it in their head."""
    big = [f"{p.relative_to(ROOT)}: {n} lines" for pkg in PACKAGES[:4] for p in _sources(pkg)
           if (n := len(p.read_text().splitlines())) > 460]
    assert not big, "\n".join(big)


def test_the_checks_see_a_bad_import_and_a_circle(tmp_path):
    """The parser and the circle finder are not blind: a lazy upward import is found, and so is a
    circle through a lazy import (model -> train -> checkpoint -> model, as tlm once had)."""
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from cluster.cli import main\n    from collectors import zoo\n")
    assert _imports(f) == [(2, "cluster.cli"), (3, "collectors.zoo")]
    graph = {"model": {"train"}, "train": {"checkpoint"}, "checkpoint": {"model"}, "api": {"model"}, "alone": set()}
    assert _circles(graph) == [["checkpoint", "model", "train"]]
    assert _circles({"a": {"b"}, "b": set()}) == []
