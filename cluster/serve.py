"""The schedule server: a Ray Serve deployment with a FastAPI ingress.

One class, ``ScheduleServer``: ``__init__`` opens the corpus (optional: workload keys and the
closed loop need it), ``get_model`` loads the model of a hardware key (``@serve.multiplexed``,
so a replica keeps the few keys it was asked for and evicts the least recently used), and one
method per route. Request handling itself (parsing TVMScript, generating, measuring, errors)
is framework-free in ``tlm/service/api.py``; this module adds HTTP: the body-size limit, the bearer
token (``TLM_SERVE_TOKEN``; every route but ``/healthz``), status codes, OpenAPI.

Generation runs in a worker thread under a lock: one decode at a time per replica, since torch
already uses every core of it; more throughput is more replicas (``num_replicas``).

Run it with ``tlm serve`` (local Ray, 127.0.0.1:8000) or ``serve deploy serve_config.yaml`` on
a cluster (``build_app`` reads the config's ``args``).
"""
# no "from __future__ import annotations": FastAPI reads the route annotations through Serve's wrapper
import asyncio
import logging
import math
import os
import threading
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from ray import serve

from tlm.service.api import (ERROR_RESPONSES, MAX_BODY_BYTES, TOKEN_ENV, ApiError, ModelInfo, ModelsResponse,
                             ScheduleRequest, ScheduleResponse, check_token)
from tlm.service.catalog import SHIPPED_MODELS

log = logging.getLogger(__name__)

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

app = FastAPI(title="tlm-cluster schedule server",
              description="Valid tensor-program schedules written by a tensor language model, in one pass.",
              version="1")


class _Guard:
    """What the middleware checks, set by the replica's ``__init__`` (one deployment per process)."""

    token: str | None = None


@app.middleware("http")
async def _guard(request: Request, call_next: Any) -> Any:
    """Token on every route but /healthz; POST bodies must say their size and stay under the limit."""
    if request.url.path != "/healthz":
        try:
            check_token(request.headers.get("authorization"), _Guard.token)
        except ApiError as exc:
            return JSONResponse({"detail": exc.message}, status_code=exc.status,
                                headers={"WWW-Authenticate": "Bearer"})
    if request.method == "POST":
        size = request.headers.get("content-length")
        if size is None or not size.isdigit():
            return JSONResponse({"detail": "a POST body needs a Content-Length"}, status_code=411)
        if int(size) > MAX_BODY_BYTES:
            return JSONResponse({"detail": f"body of {int(size)} bytes is over the limit of {MAX_BODY_BYTES}"},
                                status_code=413)
    return await call_next(request)


class _Loaded:
    """A hardware key's loaded model as the multiplexer holds it: evicting it (least recently
    used, past four keys) calls ``__del__``, which keeps ``/v1/models`` truthful."""

    def __init__(self, loaded: dict, key: str, serving: Any, model: Any, tokenizer: Any, ranker: Any = None) -> None:
        self._loaded, self.key, self.model, self.tokenizer = loaded, key, model, tokenizer
        self.serving = serving  # catalog.Serving: the model's entry, and whether it is a fallback
        self.ranker = ranker  # the model's cost model, when its directory has one
        self._gone = False
        loaded[key] = self.entry.model_id

    @property
    def entry(self) -> Any:
        return self.serving.entry

    def __del__(self) -> None:  # Serve calls it on eviction, Python again on collection: act once
        if not self._gone and self._loaded.get(self.key) == self.entry.model_id:
            self._loaded.pop(self.key, None)
        self._gone = True


def _http_error(exc: ApiError) -> JSONResponse:
    return JSONResponse({"detail": exc.message}, status_code=exc.status)


@app.exception_handler(RequestValidationError)
async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    """422 naming each problem, shaped as the schema documents it (``HTTPValidationError``).
    FastAPI's own handler echoes the offending input, and a body holding ``Infinity`` or ``NaN``
    (Python's json writes and reads them) made that echo unserialisable: a 500. The input is
    echoed as its (shortened) repr, the context stays an object of JSON values."""
    detail = []
    for e in exc.errors():
        item = {k: v for k, v in e.items() if k not in ("input", "ctx")}
        if "input" in e:
            item["input"] = repr(e["input"])[:200]
        if "ctx" in e:
            item["ctx"] = {str(k): _json_value(v) for k, v in e["ctx"].items()}
        detail.append(item)
    return JSONResponse({"detail": detail}, status_code=422)


def _json_value(v: object) -> object:
    """``v`` if JSON can carry it as it is (a finite number, a string, a bool, None), else its repr."""
    if v is None or isinstance(v, (str, bool, int)) or (isinstance(v, float) and math.isfinite(v)):
        return v
    return repr(v)[:200]


@serve.deployment(max_ongoing_requests=32, ray_actor_options={"num_cpus": 1})
@serve.ingress(app)
class ScheduleServer:
    """Schedules for TVMScript PrimFuncs (or known workloads), per hardware key."""

    def __init__(self, corpus: str | None = None, index_url: str | None = None,
                 models_root: str = SHIPPED_MODELS, append: bool = True) -> None:
        import tlm.service.generator as generator
        from storage import Corpus

        if generator.DECODE_THREADS is None:  # its one CPU, many requests at once: one thread each
            generator.DECODE_THREADS = 1
        _Guard.token = os.environ.get(TOKEN_ENV) or None
        self.models_root = models_root
        self.corpus = Corpus.open(corpus, index_url=index_url) if corpus else None
        self.append = append and self.corpus is not None
        self.loaded: dict[str, str] = {}  # hardware key -> model id loaded for it
        self.unavailable: dict[str, str] = {}  # hardware key -> why its model failed to load
        self.fallbacks: dict[str, Any] = {}  # hardware key without a model -> the catalog.Serving answering for it
        self._lock = threading.Lock()
        self._local: dict[str, _Loaded] = {}  # models of local testing mode (see _model)

    @serve.multiplexed(max_num_models_per_replica=4)
    async def get_model(self, hardware_key: str) -> _Loaded:
        """The loaded model of a hardware key; raises NoModel or the load error."""
        return await self._load(hardware_key)

    async def _model(self, hardware_key: str) -> _Loaded:
        """Through the multiplexer in a replica; Serve's local testing mode has no replica
        context, which ``@serve.multiplexed`` needs, so there the loader's results are kept in
        a dict instead (same loader, same errors)."""
        try:
            serve.get_replica_context()
        except Exception:  # noqa: BLE001 - RayServeException outside a replica
            if hardware_key not in self._local:
                self._local[hardware_key] = await self._load(hardware_key)
            return self._local[hardware_key]
        return await self.get_model(hardware_key)

    def _serving(self, hardware: Any) -> Any:
        """The catalog's answer for a key: its own model, else the nearest (raises NoModel)."""
        from tlm.service.catalog import serving_model

        return serving_model(hardware, self.corpus, root=self.models_root)

    def _hardware(self, hardware_key: str) -> Any:
        """The Hardware a key names (the index's row when the corpus has one); ValueError if none can be built."""
        from collectors.hardware import hardware_for_key

        info = self.corpus.hardware_info(hardware_key) if self.corpus is not None else None
        return hardware_for_key(hardware_key, info)

    async def _load(self, hardware_key: str) -> _Loaded:
        from tlm.service.catalog import ranker_for
        from tlm.model.network import load_model

        serving = self._serving(self._hardware(hardware_key))
        entry = serving.entry
        model, tokenizer, _ = await asyncio.to_thread(load_model, entry.path)
        ranker, ranked_by = await asyncio.to_thread(ranker_for, entry.path, hardware_key)
        self.unavailable.pop(hardware_key, None)
        log.info("loaded %s for %s from %s (cost model: %s)%s", entry.model_id, hardware_key, entry.path, ranked_by,
                 f"; fallback: {serving.why}" if serving.fallback else "")
        if serving.fallback:
            self.fallbacks[hardware_key] = serving
        return _Loaded(self.loaded, hardware_key, serving, model, tokenizer, ranker)

    @app.get("/healthz")
    async def healthz(self) -> dict:
        return {"status": "ok"}

    @app.get("/v1/models", response_model=ModelsResponse,
             responses={s: r for s, r in ERROR_RESPONSES.items() if s in (401, 413)})
    async def models(self) -> ModelsResponse:
        from tlm.service.catalog import available_models

        out, seen = [], set()
        for m in available_models(self.corpus, root=self.models_root):
            key = m.hardware_key
            first = key is not None and key not in seen  # the model that answers for the key
            seen.add(key)
            status = ("unavailable" if first and key in self.unavailable else
                      "loaded" if first and self.loaded.get(key) == m.model_id else "available")
            out.append(ModelInfo(model_id=m.model_id, hardware=key, stage=m.stage, source=m.source, status=status,
                                 error=self.unavailable.get(key) if status == "unavailable" else None,
                                 hardware_keys=list(m.hardware_keys)))
        for key, sv in sorted(self.fallbacks.items()):  # keys answered by another key's model
            if self.loaded.get(key) == sv.entry.model_id:
                out.append(ModelInfo(model_id=sv.entry.model_id, hardware=key, stage=sv.entry.stage,
                                     source=sv.entry.source, status="loaded", hardware_keys=list(sv.entry.hardware_keys),
                                     fallback=True, fallback_reason=sv.why))
        return ModelsResponse(models=out)

    @app.post("/v1/schedules", response_model=ScheduleResponse, responses=ERROR_RESPONSES)
    async def schedules(self, req: ScheduleRequest) -> Any:
        try:
            return await self.answer(req)
        except ApiError as exc:
            return _http_error(exc)

    async def answer(self, req: ScheduleRequest) -> ScheduleResponse:
        """The response to one request (ApiError for everything the client can fix)."""
        from storage import HARDWARE_KEY_RE
        from tlm.service.api import schedule, task_of_request
        from tlm.service.catalog import NoModel, model_for

        if not HARDWARE_KEY_RE.match(req.hardware):
            raise ApiError(400, f"hardware {req.hardware!r} is not a hardware key ({HARDWARE_KEY_RE.pattern})")
        try:
            try:
                hardware = self._hardware(req.hardware)
            except ValueError as exc:  # no target for the key: nothing to fall back on; 422 if it has a model
                model_for(req.hardware, self.corpus, root=self.models_root)
                raise ApiError(422, str(exc)) from None
            if req.hardware not in self.loaded:  # a 404 before the multiplexer logs it as a load failure
                self._serving(hardware)
        except NoModel as exc:
            raise ApiError(404, str(exc)) from None
        try:
            held = await self._model(req.hardware)
        except NoModel as exc:
            raise ApiError(404, str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - a broken model directory: that key is down, the replica is not
            self.unavailable[req.hardware] = f"{type(exc).__name__}: {str(exc)[:300]}"
            log.warning("model for %s failed to load: %s", req.hardware, exc)
            raise ApiError(503, f"the model for hardware {req.hardware} failed to load: "
                                f"{self.unavailable[req.hardware]}") from None
        on_records = self.corpus.append if self.append else None

        def run() -> ScheduleResponse:
            with self._lock:
                task = task_of_request(req, self.corpus)
                out = schedule(req, task, hardware, held.model, held.tokenizer, held.entry.model_id,
                               on_records=on_records, ranker=held.ranker, corpus=self.corpus)
            out.fallback, out.fallback_reason = held.serving.fallback, held.serving.why or None
            return out

        return await asyncio.to_thread(run)


def build_app(args: dict) -> Any:
    """The application ``serve deploy`` / ``serve run`` builds from a config's ``args``:
    ``corpus`` (directory; relative to the project root), ``index_url``, ``models_root``,
    ``append`` (closed loop on measured requests, default true), ``num_replicas``."""
    args = dict(args or {})
    unknown = set(args) - {"corpus", "index_url", "models_root", "append", "num_replicas"}
    if unknown:
        raise ValueError(f"unknown serve args {sorted(unknown)}; known: corpus, index_url, models_root, append, "
                         "num_replicas")

    def absolute(p: str | None) -> str | None:
        return p if p is None or os.path.isabs(p) else os.path.join(PROJECT_ROOT, p)

    deployment = ScheduleServer.options(num_replicas=int(args.get("num_replicas", 1)))
    return deployment.bind(corpus=absolute(args.get("corpus")), index_url=args.get("index_url"),
                           models_root=absolute(args.get("models_root")) or SHIPPED_MODELS,
                           append=bool(args.get("append", True)))
