"""The model registry: register, list newest first, pick the newest usable model, and the
upgrade of an index made before ``models.data_snapshot`` existed."""
from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from storage import BadHardwareKey, Corpus
from storage import index as ix

HW, OTHER = "cuda-sm_90-h200", "cpu-znver4-2c"


def test_register_and_list_newest_first(corpus):
    corpus.register_model("m1", path="/models/m1", hardware_key=HW, metrics={"val_loss": 1.5})
    corpus.register_model("m2", path="/models/m2", hardware_key=HW, base_model_id="m1", data_snapshot="run-abc",
                          metrics={"val_loss": 1.2})
    corpus.register_model("m3", path="/models/m3", hardware_key=OTHER)
    assert [m["model_id"] for m in corpus.models()] == ["m3", "m2", "m1"]
    assert [m["model_id"] for m in corpus.models(HW)] == ["m2", "m1"]
    m2 = corpus.models(HW)[0]
    assert (m2["path"], m2["hardware_key"], m2["base_model_id"], m2["data_snapshot"], m2["metrics"]) == (
        "/models/m2", HW, "m1", "run-abc", {"val_loss": 1.2})
    assert "metrics_json" not in m2 and m2["created_at"].tzinfo is not None
    m3 = corpus.models(OTHER)[0]
    assert (m3["base_model_id"], m3["data_snapshot"], m3["metrics"]) == (None, None, {})
    assert corpus.stats()["models"] == 3


def test_newest_model_is_the_newest_usable(corpus):
    assert corpus.newest_model(HW) is None
    corpus.register_model("good", path="/m/good", hardware_key=HW, metrics={"ok": True, "val_loss": 1.0})
    corpus.register_model("not-ok", path="/m/not-ok", hardware_key=HW, metrics={"ok": False})
    corpus.register_model("failed", path="/m/failed", hardware_key=HW, metrics={"status": "failed"})
    corpus.register_model("elsewhere", path="/m/elsewhere", hardware_key=OTHER)
    assert corpus.newest_model(HW)["model_id"] == "good"
    assert corpus.newest_model(OTHER)["model_id"] == "elsewhere"
    assert corpus.newest_model("cpu-other-1c") is None
    # registering an id again replaces it and makes it the newest: a failed model marked good
    corpus.register_model("failed", path="/m/failed", hardware_key=HW, metrics={"status": "done"})
    assert corpus.newest_model(HW)["model_id"] == "failed"
    assert [m["model_id"] for m in corpus.models(HW)][0] == "failed" and len(corpus.models(HW)) == 3


def test_bad_hardware_key_refused(corpus):
    with pytest.raises(BadHardwareKey, match="'gpu-h200'"):
        corpus.register_model("m", path="/m", hardware_key="gpu-h200")
    with pytest.raises(BadHardwareKey, match="'H200'"):
        corpus.newest_model("H200")
    assert corpus.models() == []


def _v1_index(url: str) -> None:
    """An index as schema version 1 made it: every table of today, ``models`` without
    ``data_snapshot`` and ``runs`` without ``driver_json``."""
    v1 = sa.MetaData()
    for table in ix.metadata.sorted_tables:
        if table.name not in ("models", "runs"):
            table.to_metadata(v1)
    sa.Table("runs", v1, *(sa.Column(c.name, c.type, primary_key=c.primary_key, nullable=c.nullable)
                           for c in ix.runs.columns if c.name != "driver_json"))
    sa.Table(
        "models", v1,
        sa.Column("model_id", sa.String(200), primary_key=True),
        sa.Column("hardware_key", sa.String(200)),
        sa.Column("base_model_id", sa.String(200)),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("metrics_json", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        v1.create_all(conn)
        conn.execute(sa.insert(v1.tables["schema_version"]).values(version=1))
        conn.execute(sa.insert(v1.tables["models"]).values(
            model_id="old", hardware_key=HW, path="/m/old", metrics_json='{"val_loss": 2.0}',
            created_at=dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)))
    engine.dispose()


def test_version_1_index_is_upgraded(tmp_path, index_url):
    root = tmp_path / "c"
    root.mkdir()
    url = index_url or f"sqlite:///{root / 'index.sqlite'}"
    _v1_index(url)
    c = Corpus.open(root, index_url=index_url)
    with c.engine.connect() as conn:
        assert conn.execute(sa.select(ix.schema_version.c.version)).scalars().all() == [ix.SCHEMA_VERSION]
        assert "data_snapshot" in {col["name"] for col in sa.inspect(conn).get_columns("models")}
        assert "driver_json" in {col["name"] for col in sa.inspect(conn).get_columns("runs")}
    (old,) = c.models()
    assert (old["model_id"], old["data_snapshot"], old["metrics"]) == ("old", None, {"val_loss": 2.0})
    c.register_model("new", path="/m/new", hardware_key=HW, data_snapshot="snap-1")
    assert [(m["model_id"], m["data_snapshot"]) for m in c.models(HW)] == [("new", "snap-1"), ("old", None)]
    assert c.newest_model(HW)["model_id"] == "new"
    c.close()
    again = Corpus.open(root, index_url=index_url)  # an upgraded index opens as a current one
    assert [m["model_id"] for m in again.models()] == ["new", "old"]
    again.close()
