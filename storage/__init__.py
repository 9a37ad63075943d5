"""storage: the corpus of measured schedules (Parquet parts + a SQL index).

Public surface (docs/CONTRACTS.md, section storage)::

    from storage import Corpus, AppendResult, RECORD_SCHEMA, make_record_id, workload_key

``workload_key`` lives in ``storage.interop``, the only module that imports TVM (lazily, inside
its functions), so ``import storage`` stays fast.
"""
from storage.corpus import AppendResult, Corpus, ReindexReport, VerifyReport
from storage.errors import BadHardwareKey, CorpusError, IndexUnavailable, IndexVersionError, SchemaMismatch
from storage.interop import workload_key
from storage.schema import HARDWARE_KEY_RE, RECORD_SCHEMA, make_record_id

__all__ = [
    "AppendResult",
    "BadHardwareKey",
    "Corpus",
    "CorpusError",
    "HARDWARE_KEY_RE",
    "IndexUnavailable",
    "IndexVersionError",
    "RECORD_SCHEMA",
    "ReindexReport",
    "SchemaMismatch",
    "VerifyReport",
    "make_record_id",
    "workload_key",
]
