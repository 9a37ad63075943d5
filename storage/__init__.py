"""storage: the corpus of measured schedules (Parquet parts + a SQL index).

Public surface (docs/CONTRACTS.md, section storage)::

    from storage import Corpus, AppendResult, Record, RECORD_SCHEMA, make_record_id

``Corpus`` is the one entry point: its methods come from one module per concept (``corpus``:
open, append, scan, top_k, stats, workloads and hardware; ``integrity``: verify, reindex;
``runs``: runs and task status; ``registry``: trained models); ``merge(dest, source)`` brings
one corpus into another (``storage.merge``).

Storage is data only and imports no TVM: a workload key is computed from a TVM module by
``collectors.tir.workload_key``, and MetaSchedule's JSON database goes in and out through
``collectors.ms_database``.
"""
from storage.corpus import AppendResult, Corpus
from storage.errors import BadHardwareKey, CorpusError, IndexUnavailable, IndexVersionError, SchemaMismatch
from storage.integrity import ReindexReport, VerifyReport
from storage.merge import MergeReport, merge
from storage.schema import HARDWARE_KEY_RE, RECORD_SCHEMA, Record, make_record_id

__all__ = [
    "AppendResult",
    "BadHardwareKey",
    "Corpus",
    "CorpusError",
    "HARDWARE_KEY_RE",
    "IndexUnavailable",
    "IndexVersionError",
    "MergeReport",
    "RECORD_SCHEMA",
    "Record",
    "ReindexReport",
    "SchemaMismatch",
    "VerifyReport",
    "make_record_id",
    "merge",
]
