"""The model registry: trained checkpoints recorded in the index's ``models`` table.

Training registers each checkpoint it saves (``register_model``); the generator and the server
ask for the newest *usable* model of their hardware key (``newest_model``) instead of guessing a
directory. A row keeps what a model needs to be trusted and reproduced: where it is (``path``,
a ``save_pretrained`` directory), what it was fine-tuned from (``base_model_id``), which corpus
snapshot it was trained on (``data_snapshot``), and its evaluation (``metrics``).

Usable: a model is usable unless its metrics say it is not, i.e. they carry ``"ok": False`` or
``"status": "failed"`` (a training run that registers a checkpoint before evaluating it can
mark it failed afterwards by registering it again). Nothing else is judged here: storage does
not know which metric is good enough.

The methods live in :class:`RegistryMixin`, which :class:`storage.corpus.Corpus` inherits, so
``corpus.register_model(...)`` etc. stay the one entry point.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Mapping

import sqlalchemy as sa

from storage import index as ix
from storage.schema import check_hardware_key

log = logging.getLogger(__name__)

FAILED_STATUS = "failed"  # metrics["status"] that makes a model unusable


def usable(metrics: Mapping[str, Any]) -> bool:
    """The registry's one rule (module docstring): not ``ok: False`` and not ``status: "failed"``."""
    return metrics.get("ok") is not False and metrics.get("status") != FAILED_STATUS


class RegistryMixin:
    """The model registry of :class:`storage.corpus.Corpus` (mixed into it; uses its ``engine``)."""

    engine: sa.Engine

    def register_model(
        self,
        model_id: str,
        *,
        path: str,
        hardware_key: str | None = None,
        base_model_id: str | None = None,
        data_snapshot: str | None = None,
        metrics: Mapping[str, Any] | None = None,
    ) -> None:
        """Record a trained model checkpoint (a ``save_pretrained`` directory).

        Registering an id again replaces its row and makes it the newest (e.g. after evaluation).
        ``data_snapshot`` names the corpus snapshot it was trained on (free text, e.g. a run id).
        """
        if hardware_key is not None:
            check_hardware_key(hardware_key)
        ix.upsert(
            self.engine, ix.models, {"model_id": model_id},
            {"path": str(path), "hardware_key": hardware_key, "base_model_id": base_model_id,
             "data_snapshot": None if data_snapshot is None else str(data_snapshot),
             "metrics_json": json.dumps(dict(metrics or {}), sort_keys=True), "created_at": ix.now()},
        )
        log.info("registered model %s (hardware %s) at %s", model_id, hardware_key, path)

    def models(self, hardware_key: str | None = None) -> list[dict]:
        """Registered models, newest first (optionally of one hardware key), with ``metrics`` decoded."""
        m = ix.models.c
        q = sa.select(ix.models).order_by(m.created_at.desc(), m.model_id.desc())
        if hardware_key is not None:
            q = q.where(m.hardware_key == hardware_key)
        with ix.read(self.engine) as conn:
            rows = [ix.utc_row(r) for r in conn.execute(q).mappings()]
        for r in rows:
            r["metrics"] = json.loads(r.pop("metrics_json") or "{}")
        return rows

    def newest_model(self, hardware_key: str) -> dict | None:
        """The newest usable model of ``hardware_key`` (a row of :meth:`models`), or None if none is."""
        check_hardware_key(hardware_key)
        return next((r for r in self.models(hardware_key) if usable(r["metrics"])), None)
