"""The whole system under fire: the fault table, a fuzz of the server, load and a replica killed.

    .venv/bin/python -m bench.reliability [--fuzz 400] [--load-s 60] [--clients 4] [--no-faults]

Side by side in one run, on this machine:

* **faults**: the fault-injection suite (pytest marker ``faults``: ``tests/faults`` and the Ray-mode kills in ``tests/cluster``) run apart;
  each test records its row (fault, where, outcome, lost, duplicated: counted by the test, not
  assumed) and a failed test is a row with outcome ``FAILED``;
* **fuzz**: ``tlm serve``'s stack on loopback (local Ray Serve, FastAPI, the shipped model for
  this CPU) is sent ``--fuzz`` hostile requests, seeded: every route with wrong methods, bodies
  that are not JSON, every field of ``POST /v1/schedules`` given values of the wrong type, out of
  range, huge, unicode or path-like, unknown fields, TVMScript carrying Python, a 2 MB and a
  100 MB body. Counted by status; a 5xx, a connection error or an answer over the timeout is a
  failure, and a 4xx must name the problem (a non-empty ``detail``);
* **load**: ``--clients`` clients send a small matmul (k=1, no ranking) for ``--load-s``
  seconds: requests/s, p50, p99, errors; then the same with the replica killed (``ray.kill``)
  after a third of the time: the kill window (from the kill to the first correct answer after
  it) and the errors outside it. Targets: 0 errors outside the window, p99 <= 5x p50, recovery
  <= 30 s.

* **schemathesis**: its ``st run`` against the server's own OpenAPI schema (``/openapi.json``) on
  the same server, ``--schemathesis`` examples per operation and phase (examples, coverage,
  fuzzing, stateful): no 5xx, and every answer's status and shape as the schema documents them.

JSON to ``bench/results/reliability.json`` (keys ``faults``, ``fuzz``, ``schemathesis``, ``load``)
and Markdown beside it.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from bench._common import machine, matmul_task, percentile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results", "reliability.json")
#: What the issue asks for that no test of the suite covers yet, said in the results.
NOT_COVERED: list[str] = []


# ---------------------------------------------------------------------------------------------
# faults

def run_faults() -> dict:
    """Run the tests marked ``faults`` in a subprocess and collect the rows they recorded."""
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl", delete=False) as f:
        table = f.name
    env = dict(os.environ, TLM_FAULT_TABLE=table)
    t0 = time.perf_counter()
    got = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-m", "faults", "tests", "-rf"],
                         cwd=ROOT, env=env, capture_output=True, text=True)
    rows = [json.loads(line) for line in open(table) if line.strip()]
    os.unlink(table)
    failed = [line.split(" ", 1)[1].split(" - ")[0] for line in got.stdout.splitlines() if line.startswith("FAILED ")]
    for test in failed:
        rows.append({"fault": test.split("::")[-1], "where": test, "outcome": "FAILED", "lost": None,
                     "duplicated": None, "test": test})
    return {"rows": rows, "pytest_rc": got.returncode, "wall_s": time.perf_counter() - t0,
            "summary": (got.stdout.strip().splitlines() or [""])[-1], "not_covered": NOT_COVERED}


# ---------------------------------------------------------------------------------------------
# fuzz

def hostile_requests(valid: dict, n: int, seed: int = 0) -> list[tuple[str, str, Any, dict]]:
    """``n`` (method, path, body, headers) hostile requests built from ``valid`` (a correct
    ``POST /v1/schedules`` body): ``body`` is bytes (sent as is) or an object (sent as JSON)."""
    rng = random.Random(seed)
    junk_values = [None, True, -1, 0, 65, 10**30, 1.5e308, float("inf"), "", "x" * 5000, "../../etc/passwd",
                   "cpu-../../x", "'; DROP TABLE records; --", "ünïcødé-键", [], [1, 2], {}, {"a": {"b": []}}]
    payloads = ["import os\nos.system('id')", "__import__('os').system('id')", "T.evaluate(exec('1'))",
                "@T.prim_func\ndef f(): pass\n" * 200, "from tvm.script import tir as T\n" + "x=" * 5000 + "1"]
    fixed: list[tuple[str, str, Any, dict]] = [
        ("GET", "/v1/schedules", None, {}), ("PUT", "/v1/schedules", valid, {}), ("DELETE", "/v1/models", None, {}),
        ("POST", "/healthz", {}, {}), ("GET", "/nothing/here", None, {}), ("GET", "/../../etc/passwd", None, {}),
        ("POST", "/v1/schedules", b"{not json", {"content-type": "application/json"}),
        ("POST", "/v1/schedules", b"\xff\xfe\x00", {"content-type": "application/json"}),
        ("POST", "/v1/schedules", json.dumps(valid).encode(), {"content-type": "text/plain"}),
        ("POST", "/v1/schedules", b"[]", {"content-type": "application/json"}),
        ("POST", "/v1/schedules", {**valid, "tvmscript": "x" * (2 << 20)}, {}),
        ("POST", "/v1/schedules", b"{" + b" " * (100 << 20) + b"}", {"content-type": "application/json"}),
    ]
    out = list(fixed)
    while len(out) < n:
        body = dict(valid)
        for _ in range(rng.randint(1, 3)):
            how = rng.random()
            field = rng.choice(["tvmscript", "hardware", "k", "rank", "measure", "workload_key", "keep_layout"])
            if how < 0.5:
                body[field] = rng.choice(junk_values)
            elif how < 0.65:
                body[field] = rng.choice(payloads) if field == "tvmscript" else rng.choice(junk_values)
            elif how < 0.8:
                body.pop(field, None)
            else:
                body[rng.choice(["extra", "__class__", "k ", "K"])] = rng.choice(junk_values)
        out.append(("POST", "/v1/schedules", body, {}))
    return out[:n]


def _summary(body: Any) -> str:
    """A short description of a request body for a failure line."""
    if isinstance(body, (bytes, bytearray)):
        return f"{len(body)} raw bytes"
    if not isinstance(body, dict):
        return repr(body)[:80]
    return "{" + ", ".join(f"{k}: {(repr(v)[:40] + '...') if len(repr(v)) > 40 else repr(v)}"
                           for k, v in body.items()) + "}"


def run_fuzz(url: str, valid: dict, n: int, timeout_s: float) -> dict:
    """Send the hostile requests; count statuses; a 5xx, a timeout or a 4xx without a message fails."""
    import httpx

    by_status: dict[str, int] = {}
    failures: list[str] = []
    slowest = 0.0
    with httpx.Client(base_url=url, timeout=timeout_s) as c:
        for method, path, body, headers in hostile_requests(valid, n):
            t0 = time.perf_counter()
            try:
                if body is None:
                    r = c.request(method, path)
                else:  # JSON as Python writes it: non-finite numbers go out as Infinity / NaN, as hostile clients send
                    raw = body if isinstance(body, (bytes, bytearray)) else json.dumps(body).encode()
                    r = c.request(method, path, content=raw, headers={"content-type": "application/json", **headers})
            except Exception as exc:  # noqa: BLE001 - a dropped connection or a timeout is a failure
                by_status["no answer"] = by_status.get("no answer", 0) + 1
                failures.append(f"{method} {path}: {type(exc).__name__} after {time.perf_counter() - t0:.1f} s "
                                f"for {_summary(body)}")
                continue
            slowest = max(slowest, time.perf_counter() - t0)
            by_status[str(r.status_code)] = by_status.get(str(r.status_code), 0) + 1
            if r.status_code >= 500:
                failures.append(f"{method} {path}: {r.status_code} {r.text[:200]}")
            elif r.status_code >= 400 and path.startswith("/v1/") and method == "POST":
                try:
                    detail = r.json().get("detail")
                except Exception:  # noqa: BLE001
                    detail = None
                if not detail:
                    failures.append(f"{method} {path}: {r.status_code} without a message")
    server_errors = sum(v for k, v in by_status.items() if k.startswith("5") or k == "no answer")
    return {"requests": n, "by_status": dict(sorted(by_status.items())), "server_errors": server_errors,
            "failures": failures[:40], "slowest_s": slowest}


def run_schemathesis(url: str, max_examples: int, seed: int = 0, timeout_s: float = 120) -> dict:
    """schemathesis (its ``st`` CLI) against the server's own OpenAPI schema: every operation, cases
    generated from the schema and beyond it (its negative phases), each answer checked for a 5xx
    and for conformance to the schema's status codes and response shapes. Counts from its JSON
    report: operations, cases, and each failed check with the request that failed it."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.ndjson")
        cmd = [os.path.join(os.path.dirname(sys.executable), "st"), "run", f"{url}/openapi.json", "--url", url,
               "--checks", "not_a_server_error,status_code_conformance,response_schema_conformance",
               "--max-examples", str(max_examples), "--seed", str(seed), "--request-timeout", str(timeout_s),
               "--report", "ndjson", "--report-ndjson-path", report, "--no-color"]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=tmp)  # its cache dir goes there
        wall = time.perf_counter() - t0
        events = [json.loads(line) for line in open(report)] if os.path.exists(report) else []
    cases, operations, failures, by_status = 0, set(), [], {}
    for ev in events:
        rec = (ev.get("ScenarioFinished") or {}).get("recorder") or {}
        if not rec:
            continue
        operations.add(rec.get("label"))
        cases += len(rec.get("cases") or {})
        for inter in (rec.get("interactions") or {}).values():
            code = str(((inter or {}).get("response") or {}).get("status_code", "no answer"))
            by_status[code] = by_status.get(code, 0) + 1
        for checks in (rec.get("checks") or {}).values():
            for check in checks:
                if "FAIL" in str(check.get("status", "")).upper():
                    info = check.get("failure_info") or {}
                    failures.append(f"{rec.get('label')}: {check.get('name')}: {str(info.get('failure', info))[:200]}")
    tail = p.stdout.strip().splitlines()[-12:]
    return {"exit_code": p.returncode, "wall_s": wall, "operations": sorted(o for o in operations if o),
            "cases": cases, "by_status": dict(sorted(by_status.items())), "failed_checks": len(failures),
            "failures": sorted(set(failures))[:40], "summary": tail,
            "server_errors": sum(v for k, v in by_status.items() if k.startswith("5") or k == "no answer")}


# ---------------------------------------------------------------------------------------------
# load

def run_load(url: str, body: dict, clients: int, seconds: float, kill_at_s: float | None = None) -> dict:
    """``clients`` threads post ``body`` for ``seconds``; with ``kill_at_s`` the serving replica
    is killed then. Returns throughput and latency figures, and the kill window."""
    import httpx

    events: list[tuple[float, float, bool]] = []  # (sent at, latency, correct)
    lock = threading.Lock()
    t_start = time.perf_counter()
    stop_at = t_start + seconds

    def client() -> None:
        with httpx.Client(base_url=url, timeout=120) as c:
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                try:
                    r = c.post("/v1/schedules", json=body)
                    ok = r.status_code == 200 and len(r.json().get("candidates", [])) == 1
                except Exception:  # noqa: BLE001 - during the kill the connection may drop
                    ok = False
                with lock:
                    events.append((t0 - t_start, time.perf_counter() - t0, ok))
                if not ok:
                    time.sleep(0.2)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for th in threads:
        th.start()
    killed_at = None
    if kill_at_s is not None:
        time.sleep(kill_at_s)
        from cluster.cli.serve import kill_replica

        kill_replica()
        killed_at = time.perf_counter() - t_start
    for th in threads:
        th.join()
    wall = time.perf_counter() - t_start
    ok_lat = [lat for _, lat, ok in events if ok]
    out: dict[str, Any] = {"clients": clients, "seconds": seconds, "requests": len(events),
                           "correct": len(ok_lat), "errors": len(events) - len(ok_lat),
                           "requests_per_s": len(ok_lat) / wall,
                           "p50_s": statistics.median(ok_lat) if ok_lat else None,
                           "p99_s": percentile(ok_lat, 99) if ok_lat else None}
    if out["p50_s"]:
        out["p99_over_p50"] = out["p99_s"] / out["p50_s"]
    if killed_at is not None:
        after = sorted((sent + lat) for sent, lat, ok in events if ok and sent >= killed_at)
        recovered = after[0] if after else None
        out["killed_at_s"] = killed_at
        out["recovery_s"] = None if recovered is None else recovered - killed_at
        window_end = recovered if recovered is not None else float("inf")
        out["errors_outside_kill_window"] = sum(
            1 for sent, lat, ok in events if not ok and not (killed_at - lat <= sent <= window_end))
    return out


# ---------------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--faults", action=argparse.BooleanOptionalAction, default=True, help="run the fault suite (tests marked faults)")
    ap.add_argument("--fuzz", type=int, default=400, help="hostile requests to send")
    ap.add_argument("--schemathesis", type=int, default=25, metavar="N",
                    help="schemathesis examples per operation and phase (0: skip)")
    ap.add_argument("--schemathesis-into", metavar="JSON", default=None,
                    help="run the schemathesis phase alone and replace it in this results file (its other phases kept)")
    ap.add_argument("--load-s", type=float, default=60.0, help="seconds of each load phase (0: no load phase)")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--port", type=int, default=8124)
    ap.add_argument("--faults-into", metavar="JSON", default=None,
                    help="run the fault suite alone and replace the faults of this results file (its other phases kept)")
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args()
    if args.faults_into:
        res = json.load(open(args.faults_into))
        res["faults"] = run_faults()
        res["targets"] = targets(res)
        write(res, args.faults_into)
        return

    from cluster.cli.serve import start, stop
    from collectors.hardware import detect_hardware

    res: dict[str, Any] = {"machine": machine(detect_hardware("cpu"))}
    if args.schemathesis_into:
        res = json.load(open(args.schemathesis_into))
        args.faults, args.fuzz, args.load_s, args.out = False, 0, 0, args.schemathesis_into
    if args.faults:
        print("fault suite ...", flush=True)
        res["faults"] = run_faults()
        print(f"  {res['faults']['summary']}", flush=True)
    host = detect_hardware("cpu")
    valid = {"tvmscript": matmul_task(32, 48, 64).mod.script(), "hardware": host.key, "k": 1, "rank": False}
    start(port=args.port, append=False, access_log=False)
    url = f"http://127.0.0.1:{args.port}"
    try:
        import httpx

        httpx.post(url + "/v1/schedules", json=valid, timeout=300).raise_for_status()  # loads the model
        if args.fuzz:
            print(f"fuzz: {args.fuzz} hostile requests ...", flush=True)
            res["fuzz"] = run_fuzz(url, valid, args.fuzz, timeout_s=120)
            print(f"  {res['fuzz']['by_status']}; server errors {res['fuzz']['server_errors']}", flush=True)
            for f in res["fuzz"]["failures"]:
                print(f"  FAILED {f}", flush=True)
        if args.schemathesis:
            print(f"schemathesis: {args.schemathesis} examples per operation and phase ...", flush=True)
            res["schemathesis"] = run_schemathesis(url, args.schemathesis)
            sc = res["schemathesis"]
            print(f"  {sc['cases']} cases over {len(sc['operations'])} operations: {sc['by_status']}; "
                  f"failed checks {sc['failed_checks']}", flush=True)
            for f in sc["failures"]:
                print(f"  FAILED {f}", flush=True)
        if args.load_s > 0:
            print(f"load: {args.clients} clients x {args.load_s:.0f} s, then again with the replica killed ...",
                  flush=True)
            res["load"] = {"steady": run_load(url, valid, args.clients, args.load_s),
                           "replica_killed": run_load(url, valid, args.clients, args.load_s, kill_at_s=args.load_s / 3)}
            s, k = res["load"]["steady"], res["load"]["replica_killed"]
            print(f"  steady {s['requests_per_s']:.1f} req/s p50 {s['p50_s'] * 1e3:.0f} ms p99 "
                  f"{s['p99_s'] * 1e3:.0f} ms errors {s['errors']}; killed: recovery {k.get('recovery_s')} s, "
                  f"errors outside {k.get('errors_outside_kill_window')}", flush=True)
    finally:
        stop()
    res["targets"] = targets(res)
    write(res, args.out)


def write(res: dict, out: str) -> None:
    """The results as JSON at ``out`` and Markdown beside it."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=2)
    with open(os.path.splitext(out)[0] + ".md", "w") as f:
        f.write(markdown(res))
    print(f"wrote {out}")


def targets(res: dict) -> list[dict]:
    """The issue's targets, each with its value and whether it is met."""
    rows = []
    faults = res.get("faults")
    if faults:
        bad = [r for r in faults["rows"] if r["outcome"] == "FAILED" or r["lost"] or r["duplicated"]]
        rows.append({"figure": "faults survived with lost = duplicated = 0", "value": f"{len(faults['rows']) - len(bad)}"
                     f"/{len(faults['rows'])}", "target": "all", "met": not bad and faults["pytest_rc"] == 0})
    if "fuzz" in res:
        rows.append({"figure": "server errors (5xx, no answer) under fuzzing", "value": res["fuzz"]["server_errors"],
                     "target": "0", "met": res["fuzz"]["server_errors"] == 0 and not res["fuzz"]["failures"]})
    if "schemathesis" in res:
        sc = res["schemathesis"]
        rows.append({"figure": "schemathesis on the OpenAPI schema: server errors", "value": sc["server_errors"],
                     "target": "0", "met": sc["server_errors"] == 0 and sc["cases"] > 0})
        rows.append({"figure": "schemathesis: answers off the schema (status or shape)", "value": sc["failed_checks"],
                     "target": "0", "met": sc["failed_checks"] == 0})
    load = res.get("load", {})
    if load:
        s, k = load["steady"], load["replica_killed"]
        rows.append({"figure": "steady load: errors", "value": s["errors"], "target": "0", "met": s["errors"] == 0})
        rows.append({"figure": "steady load: p99 / p50", "value": round(s.get("p99_over_p50") or 0, 2),
                     "target": "<= 5", "met": (s.get("p99_over_p50") or 99) <= 5})
        rows.append({"figure": "replica killed: errors outside the kill window",
                     "value": k.get("errors_outside_kill_window"), "target": "0",
                     "met": k.get("errors_outside_kill_window") == 0})
        rows.append({"figure": "replica killed: recovery, s", "value": k.get("recovery_s") and round(k["recovery_s"], 1),
                     "target": "<= 30", "met": k.get("recovery_s") is not None and k["recovery_s"] <= 30})
    return rows


def markdown(res: dict) -> str:
    lines = [f"# Reliability: {res['machine'].get('hardware', '')} ({res['machine'].get('hardware_key', '')})", ""]
    faults = res.get("faults")
    if faults:
        lines += ["## Faults (tests marked faults)", "", "| fault | where | outcome | lost | duplicated |", "|---|---|---|---:|---:|"]
        lines += [f"| {r['fault']} | {r['where']} | {r['outcome']} | {r['lost']} | {r['duplicated']} |" for r in faults["rows"]]
        gaps = "; ".join(faults["not_covered"]) or "nothing the issue lists"
        lines += ["", f"pytest: {faults['summary']}. Not covered yet: {gaps}.", ""]
    if "fuzz" in res:
        fz = res["fuzz"]
        lines += ["## Fuzz (tlm serve on loopback)", "", f"{fz['requests']} hostile requests: "
                  + ", ".join(f"{k}: {v}" for k, v in fz["by_status"].items())
                  + f"; slowest answer {fz['slowest_s']:.2f} s; failures: {fz['failures'] or 'none'}", ""]
    if "schemathesis" in res:
        sc = res["schemathesis"]
        lines += ["## schemathesis (the server's OpenAPI schema, on loopback)", "",
                  f"{sc['cases']} cases over {len(sc['operations'])} operations ({', '.join(sc['operations'])}) in "
                  f"{sc['wall_s']:.0f} s: " + ", ".join(f"{k}: {v}" for k, v in sc["by_status"].items())
                  + f"; failed checks: {sc['failed_checks']}", ""]
        lines += [f"- {f}" for f in sc["failures"]] + ([""] if sc["failures"] else [])
    load = res.get("load")
    if load:
        lines += ["## Load (tlm serve on loopback, small matmul, k=1)", "",
                  "| phase | clients | requests/s | p50 ms | p99 ms | errors | recovery s | errors outside the kill window |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for name, p in load.items():
            lines.append(f"| {name} | {p['clients']} | {p['requests_per_s']:.1f} | {(p['p50_s'] or 0) * 1e3:.0f} | "
                         f"{(p['p99_s'] or 0) * 1e3:.0f} | {p['errors']} | {p.get('recovery_s', '-')} | "
                         f"{p.get('errors_outside_kill_window', '-')} |")
        lines.append("")
    lines += ["## Targets", "", "| figure | value | target | met |", "|---|---:|---|---|"]
    lines += [f"| {t['figure']} | {t['value']} | {t['target']} | {'yes' if t['met'] else 'no'} |" for t in res["targets"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
