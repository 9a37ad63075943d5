"""MetaSchedule's JSON database, in and out of the corpus.

It lives with the other TVM-facing concepts (collectors), not in storage: it decodes workloads
with TVM and replays every exported trace, and the hardware key of an imported CPU target is
derived by the one key rule (``collectors.hardware.key_of_target``), so an imported database
pools with live collection on the same machine.

Workload key: MetaSchedule's ``Workload`` stores ``shash = tvm_ffi.structural_hash(mod)`` as an
unsigned decimal string; ``collectors.tir.workload_key(mod)`` is the same number as 16
lowercase hex digits, so a key converts to MetaSchedule's shash and back without TVM
(:func:`key_from_shash`, :func:`shash_from_key`).

Import (:func:`import_ms`): a MetaSchedule JSON database directory (``database_workload.json``
+ ``database_tuning_record.json``; a line of the latter is ``[workload_index, [trace, run_secs,
target, args_info]]``). Workloads are decoded with TVM, keyed by ``workload_key(mod)`` and
registered with their TVMScript and ``tvm.ir.save_json(mod)`` (column ``workloads.mod_json``,
which export needs). Records get ``tuner="ms-import"`` (MetaSchedule's database does not say
which search strategy produced them), ``latency_s`` = median of ``run_secs``; a record whose
``run_secs`` are missing or MetaSchedule's failure marker (>= 1e9 s) is stored as an error. The
hardware key is the caller's, or derived from a CPU target by the collectors' key rule
(``cpu-<slug(mcpu)>-<num-cores>c``); a CUDA target names no GPU model, so the caller must pass
the key.

Export (:func:`export_ms`): successful records of one hardware key (the fastest per workload, or
all) written through TVM's own ``JSONDatabase`` (``commit_workload`` + ``TuningRecord.from_json``),
so the result is exactly what ``JSONDatabase(work_dir=...)`` reads and ``compile_relax`` applies;
replaying each trace on its workload while exporting also proves every exported trace applies.
Workloads need ``mod_json`` (or TVMScript that parses); records without ``args_info_json`` get
it from the PrimFunc's parameters.
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collectors.hardware import key_of_target
from collectors.tir import load_module, plain_json, workload_key
from storage.errors import CorpusError
from storage.schema import Record, canonical_json, check_hardware_key, make_record_id

if TYPE_CHECKING:
    from storage.corpus import Corpus

log = logging.getLogger(__name__)

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
MS_FAILED_SECS = 1e9  # MetaSchedule stores 1e10 s as the run time of a failed measurement
IMPORT_BATCH = 5000  # records per append while importing

_MASK64 = (1 << 64) - 1


def key_from_shash(shash: str | int) -> str:
    """MetaSchedule's decimal workload shash -> our 16-hex workload key."""
    return f"{int(shash) & _MASK64:016x}"


def shash_from_key(key: str) -> str:
    """Our 16-hex workload key -> MetaSchedule's decimal workload shash."""
    return str(int(key, 16))


@dataclass
class ImportReport:
    """What ``import_ms`` did."""

    records: int = 0  # tuning records read
    stored: int = 0  # newly stored (the rest were already in the corpus)
    errors: int = 0  # records stored as errors (failed measurements)
    workloads: list[str] = field(default_factory=list)  # workload keys registered
    hardware_keys: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass
class ExportReport:
    """What ``export_ms`` wrote."""

    directory: str = ""
    workloads: int = 0
    records: int = 0
    skipped: list[str] = field(default_factory=list)  # "<workload or record>: reason"


def import_ms(
    corpus: "Corpus",
    work_dir: str | os.PathLike,
    *,
    hardware_key: str | None = None,
    tuner: str = "ms-import",
    run_id: str | None = None,
    node: str | None = None,
) -> ImportReport:
    """Import a MetaSchedule JSON database directory into ``corpus`` (idempotent): its workloads
    (:func:`_import_workloads`), then its tuning records in batches (:func:`_record_of`), then
    every hardware key they name that the index does not know yet."""
    work_dir = Path(work_dir)
    wl_path, rec_path = work_dir / WORKLOAD_FILE, work_dir / RECORD_FILE
    for p in (wl_path, rec_path):
        if not p.is_file():
            raise CorpusError(f"not a MetaSchedule JSON database: {str(p)!r} is missing")
    if hardware_key is not None:
        check_hardware_key(hardware_key)
    report = ImportReport()
    keys = _import_workloads(corpus, wl_path, report)
    report.workloads = sorted(set(keys))

    now = _dt.datetime.now(_dt.timezone.utc)
    params = json.dumps({"source": str(work_dir.resolve())}, sort_keys=True)
    provenance = {"tuner": tuner, "tuner_params": params, "run_id": run_id, "node": node, "created_at": now}
    hw_seen: dict[str, dict] = {}
    batch: list[Record] = []
    for n, line in enumerate(rec_path.read_text().splitlines()):
        if not line.strip():
            continue
        rec = _record_of(line, f"{rec_path}:{n + 1}", keys, hardware_key, provenance)
        hw_seen.setdefault(rec.hardware_key, json.loads(rec.target))
        report.records += 1
        report.errors += rec.latency_s is None
        batch.append(rec)
        if len(batch) >= IMPORT_BATCH:
            report.stored += corpus.append(batch).rows
            batch.clear()
    if batch:
        report.stored += corpus.append(batch).rows
    for hw, target in hw_seen.items():
        if corpus.hardware_info(hw) is None:
            corpus.register_hardware(hw, target=target, description="registered by ms-import")
    report.hardware_keys = sorted(hw_seen)
    return report


def _import_workloads(corpus: "Corpus", wl_path: Path, report: ImportReport) -> list[str]:
    """Register every workload of ``database_workload.json``; the workload key of each line, in
    order (a tuning record names its workload by that line's index)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    keys: list[str] = []
    for n, line in enumerate(wl_path.read_text().splitlines()):
        if not line.strip():
            continue
        try:
            wl = ms.database.Workload.from_json(json.loads(line))
        except Exception as exc:  # noqa: BLE001 - name the line that is bad
            raise CorpusError(f"{wl_path}:{n + 1}: not a MetaSchedule workload: {exc}") from exc
        mod = wl.mod
        key = workload_key(mod)
        ms_key = key_from_shash(json.loads(line)[0])
        if key != ms_key:  # never seen on TVM 0.27; kept loud in case a TVM upgrade changes hashing
            report.warnings.append(f"workload {n}: MetaSchedule shash {ms_key} != structural_hash {key}; using {key}")
        func = mod["main"] if "main" in [gv.name_hint for gv in mod.get_global_vars()] else None
        name = str(func.attrs["global_symbol"]) if func is not None and func.attrs and "global_symbol" in func.attrs else None
        corpus.register_workload(key, task_name=name, tvmscript=mod.script(), mod_json=tvm.ir.save_json(mod))
        keys.append(key)
    return keys


def _record_of(line: str, where: str, keys: list[str], hardware_key: str | None, provenance: dict) -> Record:
    """The corpus record of one ``database_tuning_record.json`` line (``where`` names the line in
    errors): a failed measurement (MetaSchedule's 1e10 s, or none) is an error, never a latency.
    Anything that is not a tuning record of a known workload (bad JSON, a field of the wrong
    type, a workload index out of range, an instruction TVM does not know) is a ``CorpusError``
    naming the line: a file from elsewhere is input, not trusted."""
    import tvm

    try:
        index, (trace, run_secs, target, args_info) = json.loads(line)
    except Exception as exc:  # noqa: BLE001
        raise CorpusError(f"{where}: not a MetaSchedule tuning record: {exc}") from exc
    if type(index) is not int or not 0 <= index < len(keys):
        raise CorpusError(f"{where}: workload index {index!r} names none of the {len(keys)} workloads")
    key = keys[index]
    why = _trace_problem(trace) or _secs_problem(run_secs)
    if why is None and not isinstance(target, (dict, type(None))):
        why = f"target is a {type(target).__name__}, not an object"
    if why is None and not isinstance(args_info, (list, type(None))):
        why = f"args_info is a {type(args_info).__name__}, not a list"
    if why:
        raise CorpusError(f"{where}: not a MetaSchedule tuning record: {why}")
    target = target or {}
    hw = hardware_key or key_of_target(target)
    if hw is None:
        raise CorpusError(f"{where}: cannot derive a hardware key from target {json.dumps(target)}; pass hardware_key=")
    trace_json = canonical_json(json.dumps(trace))
    secs = [float(x) for x in (run_secs or [])]
    ok = bool(secs) and all(0 < x < MS_FAILED_SECS for x in secs)
    return Record(
        record_id=make_record_id(key, hw, trace_json), workload_key=key, hardware_key=hw,
        target=json.dumps(target, sort_keys=True), task_name=None, sketch_id=-1, trace_json=trace_json,
        decisions_json=json.dumps(trace[1] if len(trace) > 1 else []),
        run_secs=secs if ok else [], latency_s=statistics.median(secs) if ok else None,
        error=None if ok else f"ms-import: failed measurement (run_secs={run_secs})",
        tvm_version=tvm.__version__, args_info_json=json.dumps(args_info) if args_info is not None else None,
        **provenance,
    )


def _trace_problem(trace: Any) -> str | None:
    """Why ``trace`` is not a MetaSchedule trace's JSON (``[[instruction, ...], [decision, ...]]``,
    each instruction ``[kind, inputs, attrs, outputs]`` of a kind TVM registers), or None."""
    from tvm.s_tir.schedule import InstructionKind

    if not isinstance(trace, list) or not 1 <= len(trace) <= 2 or not all(isinstance(x, list) for x in trace):
        return "trace is not [instructions, decisions]"
    for inst in trace[0]:
        if not isinstance(inst, list) or not inst or not isinstance(inst[0], str):
            return f"trace instruction {str(inst)[:60]} is not [kind, inputs, attrs, outputs]"
        try:
            InstructionKind.get(inst[0])
        except Exception:  # noqa: BLE001 - TVM raises AttributeError for an unregistered kind
            return f"trace names instruction {inst[0][:60]!r}, which TVM does not know"
    return None


def _secs_problem(run_secs: Any) -> str | None:
    """Why ``run_secs`` is not a list of numbers (or null), or None."""
    if run_secs is None:
        return None
    if not isinstance(run_secs, list) or not all(type(x) in (int, float) for x in run_secs):
        return f"run_secs {str(run_secs)[:60]} is not a list of numbers"
    return None


def export_ms(
    corpus: "Corpus",
    out_dir: str | os.PathLike,
    *,
    hardware_key: str,
    best_only: bool = True,
    workload_keys: list[str] | None = None,
    overwrite: bool = False,
) -> ExportReport:
    """Write successful records of ``hardware_key`` as a MetaSchedule JSON database in ``out_dir``."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from tvm.s_tir import meta_schedule as ms

    check_hardware_key(hardware_key)
    out = Path(out_dir)
    existing = [out / f for f in (WORKLOAD_FILE, RECORD_FILE) if (out / f).exists()]
    if existing and not overwrite:
        raise CorpusError(f"{str(out)!r} already holds a MetaSchedule database ({existing[0].name}); refusing to overwrite")
    out.mkdir(parents=True, exist_ok=True)
    for f in existing:
        f.unlink()

    filters: dict[str, Any] = {"hardware_key": hardware_key}
    if workload_keys is not None:
        filters["workload_key"] = list(workload_keys)
    table = corpus.scan(filters)
    table = table.filter(pc.is_valid(table["latency_s"]))
    table = table.sort_by([("workload_key", "ascending"), ("latency_s", "ascending"), ("record_id", "ascending")])
    if best_only and table.num_rows:
        wks = table["workload_key"]
        first = pc.not_equal(wks.slice(1), wks.slice(0, table.num_rows - 1))
        table = table.filter(pa.concat_arrays([pa.array([True]), first.combine_chunks()]))

    db = ms.database.JSONDatabase(work_dir=str(out))
    report = ExportReport(directory=str(out))
    workloads: dict[str, Any] = {}
    for row in table.to_pylist():
        wk = row["workload_key"]
        if wk not in workloads:
            info = corpus.workload(wk)
            try:
                if info is None:
                    raise CorpusError("not registered")
                mod = load_module(info)
                workloads[wk] = (db.commit_workload(mod), mod)
                report.workloads += 1
            except Exception as exc:  # noqa: BLE001 - reported per workload
                workloads[wk] = None
                report.skipped.append(f"workload {wk}: {exc}")
        if workloads[wk] is None:
            continue
        wl, mod = workloads[wk]
        args_info = json.loads(row["args_info_json"]) if row["args_info_json"] else [
            plain_json(a.as_json()) for a in ms.arg_info.ArgInfo.from_prim_func(mod["main"])
        ]
        target = json.loads(row["target"]) if row["target"] else corpus.hardware_info(hardware_key)["target"]
        try:
            rec = ms.database.TuningRecord.from_json([json.loads(row["trace_json"]), row["run_secs"], target, args_info], wl)
            db.commit_tuning_record(rec)
            report.records += 1
        except Exception as exc:  # noqa: BLE001 - a trace that no longer applies is reported, not written
            report.skipped.append(f"record {row['record_id']}: {exc}")
    return report


def commit_records(database: Any, mod: Any, target: Any, records: list[Record]) -> int:
    """Put measured records (successful ones) of ``mod`` into a MetaSchedule database, as its
    own measure callback would have after measuring them (a search seeded with them draws its
    first population's measured part from them); returns how many were committed."""
    from tvm.s_tir import meta_schedule as ms

    ok = [r for r in records if r.latency_s is not None and r.run_secs]
    if not ok:
        return 0
    workload = database.commit_workload(mod)
    args_info = [plain_json(a.as_json()) for a in ms.arg_info.ArgInfo.from_prim_func(mod["main"])]
    target_json = plain_json(target.export())
    for r in ok:
        database.commit_tuning_record(ms.database.TuningRecord.from_json(
            [json.loads(r.trace_json), list(r.run_secs), target_json, args_info], workload))
    return len(ok)


def unwritten_best(database: Any) -> list[str]:
    """``"<workload key>: why"`` for each workload whose fastest record in a MetaSchedule
    ``database`` (what ``compile_relax`` builds with) leaves part of an output unwritten
    (:func:`collectors.sketches.unwritten_output`): the search of the plain library path keeps
    such programs (a convolution's pad computed at a 112-wide tile, the 113th row left as the
    memory had it), so this is where a MetaSchedule whole-model build that differs from PyTorch
    says why (``bench/compile_curve.py``)."""
    from tvm.s_tir.schedule import Schedule

    from collectors.sketches import unwritten_output

    best: dict[str, Any] = {}
    for rec in database.get_all_tuning_records():
        secs = [float(x) for x in (rec.run_secs or [])]
        if not secs or not all(0 < x < MS_FAILED_SECS for x in secs):  # a failed measurement
            continue
        key = workload_key(rec.workload.mod)
        if key not in best or statistics.mean(secs) < best[key][0]:
            best[key] = (statistics.mean(secs), rec)
    out = []
    for key, (_, rec) in sorted(best.items()):
        sch = Schedule(rec.workload.mod)
        rec.trace.apply_to_schedule(sch, remove_postproc=False)
        why = unwritten_output(sch.mod)
        if why is not None:
            out.append(f"{key}: {why}")
    return out
