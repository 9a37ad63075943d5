"""``tlm serve``: the schedule server on this machine (local Ray Serve, 127.0.0.1:8000).

    tlm serve [--host 127.0.0.1] [--port 8000] [--corpus DIR] [--index-url URL]
              [--models DIR] [--no-append] [--replicas N]

Starts a local Ray, deploys ``cluster.serve.ScheduleServer`` and serves until Ctrl-C in a
terminal or SIGTERM (``kill``; a background job of a script ignores Ctrl-C's SIGINT). Routes: ``POST /v1/schedules``, ``GET /v1/models``, ``GET /healthz``, the OpenAPI
schema at ``/openapi.json`` and docs at ``/docs``. With ``TLM_SERVE_TOKEN`` set in the
environment every route but ``/healthz`` asks for ``Authorization: Bearer <token>``. On a
cluster, deploy ``serve_config.yaml`` with ``serve deploy`` instead.

    curl -s localhost:8000/v1/schedules -H 'content-type: application/json' \\
         -d '{"tvmscript": "...", "hardware": "cpu-rocketlake-2c", "k": 4}'
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

from cluster.cli.options import UsageError, add_corpus_options, at_least_one, index_url, optional_corpus


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="serve generated schedules over HTTP (Ray Serve)", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    add_corpus_options(p, what="corpus: its registered models, workload keys, and where measured requests are "
                               "appended; without one, the shipped models only")
    p.add_argument("--models", default=None, metavar="DIR", help="shipped-models directory (default: models/)")
    p.add_argument("--no-append", action="store_true", help="do not append measured candidates to the corpus")
    p.add_argument("--replicas", type=int, default=1, help="replicas of the deployment (default 1)")
    p.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port} is not a port (1-65535)")
    at_least_one("--replicas", args.replicas)
    corpus = optional_corpus(args)
    if args.models and not os.path.isdir(args.models):
        raise UsageError(f"--models {args.models!r} is not a directory")
    handle = start(host=args.host, port=args.port, corpus=corpus, index_url=index_url(args),
                   models_root=args.models, append=not args.no_append, replicas=args.replicas)
    del handle
    print(f"serving on http://{args.host}:{args.port} (docs at /docs); Ctrl-C stops", file=sys.stderr)
    try:
        import time

        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stop()
    return 0


def start(*, host: str = "127.0.0.1", port: int = 8000, corpus: str | None = None, index_url: str | None = None,
          models_root: str | None = None, append: bool = True, replicas: int = 1, access_log: bool = True) -> object:
    """Start a local Ray (if none is running) and Serve, deploy the server, wait until it answers."""
    from ray import serve

    from cluster.ray_session import connect
    from cluster.serve import build_app

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ray.serve.schema import LoggingConfig

    connect(None)  # a local Ray's workers inherit this environment, TLM_SERVE_TOKEN included
    # without the access log (a program driving the server, as the demo): Serve's own INFO lines
    # (proxy endpoints, replicas added, "connecting to existing Serve app") are not for a person
    logging_config = None if access_log else LoggingConfig(enable_access_log=False, log_level="WARNING")
    if not access_log:
        logging.getLogger("ray.serve").setLevel(logging.WARNING)
    serve.start(http_options={"host": host, "port": port}, logging_config=logging_config)
    app = build_app({"corpus": os.path.abspath(corpus) if corpus and "://" not in corpus else corpus,
                     "index_url": index_url, "models_root": os.path.abspath(models_root) if models_root else None,
                     "append": append, "num_replicas": replicas})
    return serve.run(app, name="tlm", route_prefix="/", logging_config=logging_config)


def stop() -> None:
    """Shut Serve and the Ray this process started down."""
    import ray
    from ray import serve

    try:
        serve.shutdown()
    finally:
        ray.shutdown()


def kill_replica() -> None:
    """``ray.kill`` one replica of the schedule server (Serve starts another): the fault of
    ``bench/reliability.py``'s load phase. Found by name in the GCS (the state API needs a
    dashboard, which ``start`` does not run)."""
    import ray

    names = [a for a in ray.util.list_named_actors(all_namespaces=True)
             if "SERVE_REPLICA" in a["name"] and "ScheduleServer" in a["name"]]
    if not names:
        raise RuntimeError("no ScheduleServer replica found to kill")
    ray.kill(ray.get_actor(names[0]["name"], namespace=names[0]["namespace"]), no_restart=False)
