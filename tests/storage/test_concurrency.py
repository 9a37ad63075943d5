"""Several processes append overlapping records at once: nothing lost, nothing duplicated."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from storage import Corpus
from tests.helpers.records import check_consistent, make_records

ROOT = Path(__file__).resolve().parents[2]  # worker subprocesses import tests.helpers from here
WORKERS = 4
PER_WORKER = 160  # records per worker; worker w covers ids [w*60, w*60 + 160): heavy overlap
BATCH = 20


@pytest.mark.slow
def test_concurrent_appends_lose_and_duplicate_nothing(corpus_root, index_url):
    root = corpus_root
    Corpus.open(root, index_url=index_url).close()
    start_at = time.time() + 3.0
    code = textwrap.dedent("""
        import random, sys, time
        sys.path.insert(0, {here!r})
        from storage import Corpus
        from tests.helpers.records import make_records
        w = int(sys.argv[1])
        recs = make_records({per}, start=w * 60)
        random.Random(w).shuffle(recs)
        c = Corpus.open({root!r}, index_url={url!r})
        time.sleep(max(0.0, {start_at} - time.time()))   # all workers start together
        stored = dup = 0
        for i in range(0, len(recs), {batch}):
            r = c.append(recs[i:i + {batch}])
            stored += r.rows
            dup += r.duplicates
        print(stored, dup)
    """).format(here=str(ROOT), per=PER_WORKER, root=str(root), url=index_url, start_at=start_at, batch=BATCH)
    procs = [subprocess.Popen([sys.executable, "-c", code, str(w)], stdout=subprocess.PIPE, text=True)
             for w in range(WORKERS)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * WORKERS, outs
    stored = sum(int(o.split()[0]) for o in outs)
    dups = sum(int(o.split()[1]) for o in outs)

    expected = {r["trace_json"] for w in range(WORKERS) for r in make_records(PER_WORKER, start=w * 60)}
    c = Corpus.open(root, index_url=index_url)
    assert check_consistent(c) == len(expected)  # each distinct record exactly once
    assert set(c.scan()["trace_json"].to_pylist()) == expected
    assert stored == len(expected)  # every record reported stored by exactly one worker
    assert stored + dups == WORKERS * PER_WORKER
    assert c.verify().ok
