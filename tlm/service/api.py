"""The schedule service's requests and answers, without a web framework.

The Ray Serve deployment (``cluster/serve.py``) is a thin shell around what is here: the
pydantic request/response models (FastAPI publishes them as the OpenAPI schema), turning a
request into a :class:`collectors.tasks.Task` (TVMScript parsed after a static safety check, or
a workload key looked up in the corpus index), generating and optionally measuring, and
:class:`ApiError`, whose ``status`` is the HTTP status a problem deserves. Everything a
client can get wrong is an ``ApiError`` with a message that names it; nothing in a request is
unpickled, and weights come only from safetensors (``tlm.model.network.load_model``).

:class:`tlm.service.client.ScheduleClient` is the other side.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tlm.service.generator import MAX_K

#: The largest request body the server reads (a big fused PrimFunc is ~20 KB of TVMScript).
MAX_BODY_BYTES = 1 << 20
#: Environment variable holding the bearer token; unset or empty: no token is asked for.
TOKEN_ENV = "TLM_SERVE_TOKEN"


class ApiError(Exception):
    """A request the service cannot answer: ``status`` is the HTTP status, the message says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ScheduleRequest(BaseModel):
    """``POST /v1/schedules``: one subgraph (TVMScript or a known workload key) for one hardware."""

    model_config = ConfigDict(extra="forbid")

    tvmscript: str | None = Field(None, description="a PrimFunc (or an IRModule of one) in TVMScript",
                                  max_length=MAX_BODY_BYTES)
    workload_key: str | None = Field(None, description="a workload already in the server's corpus index",
                                     pattern=r"^[0-9a-f]{16}$")
    hardware: str = Field(..., description="hardware key, e.g. cpu-rocketlake-2c", min_length=3, max_length=128)
    k: int = Field(1, ge=1, le=MAX_K, description=f"candidates (at most {MAX_K}): ranked by the model's cost model "
                   "over a sampled pool when it has one and rank is true, the rule baseline's program first "
                   "where the rules write one (k = 1 ranked: that program alone, no pool sampled); else by "
                   "likelihood (1 = greedy: the sketch the rules would write, decoded greedily)")
    rank: bool = Field(True, description="rank by the model's cost model when it ships one (false: likelihood only, "
                       "faster: no pool is sampled)")
    measure: bool = Field(False, description="build, run and check the candidates on the server's device")
    pool: int | None = Field(None, ge=1, le=4 * MAX_K, description="programs sampled for the cost model to rank "
                             "(default: the server's, 96); a whole model's light tasks need fewer")
    keep_layout: bool = Field(False, description="schedules that read every input in its own layout: the task's "
                              "layout-free inputs (layout_free_buffers) are treated as fixed, so no candidate "
                              "has layout_rewrites")
    healthy: bool = Field(True, description="on a CPU, write tile factors that keep the program out of the static "
                          "failure modes (innermost stride-1 tile a multiple of the vector lanes, register tile within "
                          "the vector registers) where the task allows; false: anything the grammar allows")
    use_corpus: bool = Field(True, description="when the server's corpus measured this workload on this hardware and "
                             "measure is false, answer with its fastest correct record (source 'corpus', its "
                             "measured latency) instead of generating")
    use_default: bool = Field(True, description="on a CPU, a task TVM's default (serial) lowering is predicted to "
                              "run faster than any program the model can write (a few microseconds of work with "
                              "nothing to tile: every sketch parallelizes it) is answered with source 'default', no "
                              "candidates and the reason, unless the request measures; false: the model's programs")

    @model_validator(mode="after")
    def _one_task(self) -> "ScheduleRequest":
        if (self.tvmscript is None) == (self.workload_key is None):
            raise ValueError("give exactly one of tvmscript or workload_key")
        return self


class LayoutRewriteOut(BaseModel):
    """One input the schedule reads in another layout (a layout-free input, RewriteLayout)."""

    param: int  # position of the input in the function's parameters
    shape: list[int]  # its shape in the new layout
    index_map: str  # TVMScript T.index_map: original indices -> new indices


class CandidateOut(BaseModel):
    """One generated schedule."""

    rank: int  # 0 = the best (ranked: the rules' program, else the cost model's best; else the most likely)
    sketch_id: int
    score: float | None = None  # mean log-probability per decision token (None: a corpus record's)
    predicted: float | None = None  # the cost model's score (higher is faster), when it ranked
    origin: str = "model"  # "rules": the rule baseline's program, ranked beside the model's; "rules-variant": one of
    # the rules' second opinions (collectors.rules.VARIANTS), next in a ranked pool; "corpus": measured
    decisions: list[str]  # the decision words of the sentence
    trace: list = Field(description="the postprocessed MetaSchedule trace with its decisions (Trace.as_json), "
                                    "as a tuning record stores it")
    tvmscript: str  # the scheduled PrimFunc
    latency_s: float | None = None  # measured and checked (measure=true)
    error: str | None = None  # why the measurement failed
    layout_rewrites: list[LayoutRewriteOut] = Field(
        [], description="inputs read in another layout: the tvmscript rewrites them on every call (its layout "
                        "rewrite block, signature unchanged); built as MetaSchedule builds (the block removed, "
                        "RemoveWeightLayoutRewriteBlock) the function takes them already rewritten by index_map, "
                        "as measure=true ran it")


class ScheduleResponse(BaseModel):
    task_name: str
    workload_key: str
    hardware: str
    model_id: str
    fallback: bool = False  # the key has no model of its own: model_id is the nearest key's (or a multi-key model)
    fallback_reason: str | None = None  # which key's model answers, and why that one
    source: str = "model"  # "corpus": the corpus's fastest measured record of the workload on this key;
    # "default": TVM's default lowering is predicted faster than any program the model writes (no candidates)
    reason: str | None = None  # source "default": why
    sketches: int  # live sketches generated
    candidates: list[CandidateOut]
    generate_s: float  # decoding (all sketches)
    check_s: float  # proving the candidates valid
    rank_s: float = 0.0  # the cost model ranking the pool
    pool: int = 0  # candidates the cost model ranked (0: ranked by likelihood)
    measure_s: float = 0.0
    best: int | None = None  # rank of the fastest measured candidate


class ModelInfo(BaseModel):
    model_id: str
    hardware: str | None  # the key it answers for (None: a pretrained or multi-key model's own row)
    stage: str
    source: str
    status: Literal["loaded", "available", "unavailable"]
    error: str | None = None
    hardware_keys: list[str] = []  # the keys it was fine-tuned on
    fallback: bool = False  # answering for ``hardware`` without having learnt it (the nearest model)
    fallback_reason: str | None = None


class ErrorResponse(BaseModel):
    """Every answer the client can act on but a request-shape error: what was wrong, in a sentence."""

    detail: str


class ValidationItem(BaseModel):
    """One problem of a request that does not fit :class:`ScheduleRequest` (FastAPI's shape)."""

    loc: list[str | int]
    msg: str
    type: str
    input: Any = None
    ctx: dict[str, Any] | None = None


class UnprocessableResponse(BaseModel):
    """422: the request does not fit the schema (a list of problems), or the subgraph cannot be
    scheduled as sent (a sentence: no schedulable block, no schedule space on that hardware)."""

    detail: str | list[ValidationItem]


#: ``responses=`` of every route that takes a request: the statuses it may answer and their shape
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "the request is malformed (TVMScript that does not parse or "
                                                  "imports anything, a bad hardware key)"},
    401: {"model": ErrorResponse, "description": "missing or wrong bearer token (when the server has one)"},
    404: {"model": ErrorResponse, "description": "unknown workload key, or no model for the hardware"},
    409: {"model": ErrorResponse, "description": "measure asked for code this host cannot run"},
    413: {"model": ErrorResponse, "description": "body over the size limit"},
    422: {"model": UnprocessableResponse, "description": "does not fit the schema, or cannot be scheduled"},
    503: {"model": ErrorResponse, "description": "the model for the hardware failed to load"},
}


class ModelsResponse(BaseModel):
    models: list[ModelInfo]


# ---------------------------------------------------------------------------------------------
# A request's task

#: Bare names a TVMScript PrimFunc may call; everything else it calls is an attribute (``T.*``).
_CALLABLE_NAMES = frozenset({"range", "int", "float", "bool", "min", "max", "len", "tuple", "list", "abs"})
_IMPORTS = ("tvm.script", "tvm.tirx")  # modules (and their submodules) an import may name


def check_tvmscript(text: str) -> ast.Module:
    """Refuse TVMScript that could run code in the server before TVM parses it.

    TVM's parser evaluates parts of the source as Python, so the text is checked first: it
    must be Python, import only from ``tvm.script``, use no dunder or private names, and call
    only ``T.*``/``I.*`` builders or a few builtins (``range``, ``min``, ...). Raises
    :class:`ApiError` (400) naming the first offence; returns the parsed tree.
    """
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise ApiError(400, f"tvmscript does not parse: line {exc.lineno}: {exc.msg}") from None
    for node in ast.walk(tree):
        bad = None
        if isinstance(node, ast.Import):
            bad = next((f"import {a.name}" for a in node.names if not _importable(a.name)), None)
        elif isinstance(node, ast.ImportFrom):
            bad = None if _importable(node.module or "") else f"from {node.module} import"
        elif isinstance(node, ast.Name) and node.id.startswith("_"):
            bad = node.id
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            bad = "." + node.attr
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in _CALLABLE_NAMES:
            bad = f"{node.func.id}()"
        elif isinstance(node, (ast.Lambda, ast.Global, ast.Nonlocal, ast.AsyncFunctionDef, ast.Await)):
            bad = type(node).__name__.lower()
        if bad is not None:
            raise ApiError(400, f"tvmscript: {bad!s} is not allowed (line {getattr(node, 'lineno', '?')}); "
                                "send a PrimFunc written with tvm.script's T builders")
    return tree


def _importable(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in _IMPORTS)


@functools.lru_cache(maxsize=256)
def task_from_tvmscript(text: str) -> Any:
    """The :class:`collectors.tasks.Task` of a PrimFunc given as TVMScript (ApiError 400 if it is not one).

    Cached by text (a deployer sends the same subgraph again, e.g. from another model); errors
    are not cached. The Task is shared: callers must not change it."""
    import tvm

    from collectors.op_kinds import op_kind_of
    from collectors.tasks import Task, estimate_flops
    from collectors.tir import as_module, workload_key

    tree = check_tvmscript(text)
    # TVM's parser resolves T and I itself and refuses import statements: blank them out
    lines = text.splitlines()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for n in range(node.lineno - 1, node.end_lineno or node.lineno):
                lines[n] = ""
    try:
        parsed = tvm.script.from_source("\n".join(lines))
    except Exception as exc:  # noqa: BLE001 - TVM's parser raises many kinds
        first = str(exc).strip().splitlines()
        raise ApiError(400, f"tvmscript does not parse: {' '.join(first[:3])[:400]}") from None
    if isinstance(parsed, tvm.IRModule):
        funcs = [(gv.name_hint, f) for gv, f in parsed.functions.items()]
        if len(funcs) != 1 or not isinstance(funcs[0][1], tvm.tirx.PrimFunc):
            raise ApiError(400, f"tvmscript holds {len(funcs)} functions; send one PrimFunc")
        name, func = funcs[0]
    elif isinstance(parsed, tvm.tirx.PrimFunc):
        name, func = str(parsed.attrs["global_symbol"]) if parsed.attrs and "global_symbol" in parsed.attrs else "main", parsed
    else:
        raise ApiError(400, f"tvmscript is a {type(parsed).__name__}, not a PrimFunc")
    mod = as_module(func)
    try:
        flops = estimate_flops(mod)
    except Exception:  # noqa: BLE001 - an estimate, only for display
        flops = 0.0
    task_name = name if name != "main" else "user_task"
    return Task(workload_key=workload_key(mod), task_name=task_name, mod=mod, flops=flops,
                op_kind=op_kind_of(task_name, mod))


def task_of_request(req: ScheduleRequest, corpus: Any | None) -> Any:
    """The task a request names (ApiError 400/404 when it names none)."""
    if req.tvmscript is not None:
        return task_from_tvmscript(req.tvmscript)
    from collectors.tasks import task_from_index

    row = corpus.workload(req.workload_key) if corpus is not None else None
    if row is None:
        raise ApiError(404, f"workload_key {req.workload_key} is not in the server's corpus index; send tvmscript")
    try:
        return task_from_index(row)
    except ValueError as exc:
        raise ApiError(422, str(exc)) from None


# ---------------------------------------------------------------------------------------------
# Answering

def schedule(req: ScheduleRequest, task: Any, hardware: Any, model: Any, tokenizer: Any, model_id: str, *,
             on_records: Callable[[list], None] | None = None, ranker: Any = None,
             corpus: Any = None) -> ScheduleResponse:
    """Generate (and with ``measure`` build, run and check) the request's candidates, ranked by
    ``ranker`` (the model's cost model) when given and the request asks for it. A workload
    ``corpus`` measured on this key is answered with its fastest record instead (unless the
    request measures or opts out: ``use_corpus``), and a tiny task with nothing to tile with TVM's
    default lowering (``generator.serial_default``; unless the request measures or opts out:
    ``use_default``): served programs of such tasks took 1.6-8.6 us where the default took 0.01-0.8.

    A task with no schedulable block, or one the model's context cannot hold, is a 422; a
    measurement this host cannot run (another CPU's ISA) is a 409. ``on_records`` receives the
    measured records (the server appends them to its corpus: the closed loop).
    """
    from collectors import layout
    from collectors.hardware import NotRunnableHere
    from collectors.tir import trace_json
    from tlm.service.generator import RANK_POOL, generate, measure_candidates, serial_default
    from tlm.language import first_live
    from tlm.language.space import block_names, build_space

    if req.keep_layout:
        mod = layout.without_layout_freedom(task.mod)
        if mod is not task.mod:
            from collectors.tir import workload_key

            task = dataclasses.replace(task, mod=mod, workload_key=workload_key(mod))
    if corpus is not None and req.use_corpus and not req.measure:
        known = corpus.best_records([task.workload_key], hardware.key).get(task.workload_key)
        if known is not None:
            return corpus_answer(task, hardware, known, model_id)
    if not [b for b in block_names(task.mod) if b != "root"]:
        raise ApiError(422, f"{task.task_name}: no schedulable block (a PrimFunc without T.sblock computes nothing "
                            "to schedule)")
    try:
        space = build_space(task, hardware)
        alive = first_live(space, space.sketches)  # one is enough here: a greedy answer writes one sketch
    except Exception as exc:  # noqa: BLE001 - TVM cannot build a design space for it
        raise ApiError(422, f"{task.task_name}: no schedule space for it on {hardware.key}: "
                            f"{type(exc).__name__}: {str(exc)[:300]}") from None
    if alive is None:
        raise ApiError(422, f"{task.task_name}: no schedulable block (no sketch gives a valid program on "
                            f"{hardware.key})")
    if req.use_default and not req.measure:
        why = serial_default(task, hardware)
        if why is not None:
            return ScheduleResponse(task_name=task.task_name, workload_key=task.workload_key, hardware=hardware.key,
                                    model_id=model_id, source="default", reason=why, sketches=0, candidates=[],
                                    generate_s=0.0, check_s=0.0)
    try:
        g = generate(task, hardware, model, tokenizer, k=req.k, ranker=ranker if req.rank else None,
                     pool=req.pool or RANK_POOL, healthy=req.healthy)
    except ValueError as exc:  # e.g. a prompt longer than the model's context
        raise ApiError(422, f"{task.task_name}: {exc}") from None
    if req.measure:
        try:
            measure_candidates(task, hardware, g, model_id=model_id, on_records=on_records)
        except NotRunnableHere as exc:
            raise ApiError(409, f"measure: {exc}") from None
    best = g.fastest
    return ScheduleResponse(
        task_name=task.task_name, workload_key=task.workload_key, hardware=hardware.key, model_id=model_id,
        sketches=g.sketches, generate_s=g.generate_s, check_s=g.check_s, rank_s=g.rank_s, pool=g.pool,
        measure_s=g.measure_s,
        best=None if best is None else g.candidates.index(best),
        candidates=[CandidateOut(rank=i, sketch_id=c.sketch_id, score=c.score, predicted=c.predicted,
                                 origin=c.origin, decisions=c.decisions,
                                 trace=trace_json(c.schedule.trace), tvmscript=c.schedule.mod.script(),
                                 latency_s=c.latency_s, error=c.error,
                                 layout_rewrites=[LayoutRewriteOut(param=r.param, shape=list(r.shape),
                                                                   index_map=r.index_map)
                                                  for r in layout.layout_rewrites(c.schedule.mod)])
                    for i, c in enumerate(g.candidates)],
    )


def corpus_answer(task: Any, hardware: Any, record: dict, model_id: str) -> ScheduleResponse:
    """The answer of a workload the corpus measured on this key: its fastest correct record
    (issue 33: what the cluster measured, served first), with the measured latency."""
    import json

    from collectors import layout
    from collectors.tir import schedule_of

    sch = schedule_of(task.mod, record["trace_json"])
    return ScheduleResponse(
        task_name=task.task_name, workload_key=task.workload_key, hardware=hardware.key, model_id=model_id,
        source="corpus", sketches=0, generate_s=0.0, check_s=0.0,
        best=0, candidates=[CandidateOut(
            rank=0, sketch_id=int(record.get("sketch_id") if record.get("sketch_id") is not None else -1),
            origin="corpus", decisions=[], trace=json.loads(record["trace_json"]), tvmscript=sch.mod.script(),
            latency_s=record["latency_s"],
            layout_rewrites=[LayoutRewriteOut(param=r.param, shape=list(r.shape), index_map=r.index_map)
                             for r in layout.layout_rewrites(sch.mod)])])


def check_token(header: str | None, expected: str | None) -> None:
    """Bearer-token check in constant time (ApiError 401); no expected token: nothing to check."""
    import hmac

    if not expected:
        return
    given = header[7:] if header and header.startswith("Bearer ") else ""
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise ApiError(401, "missing or wrong bearer token (Authorization: Bearer <token>)")
