"""The Ray Train side of the training loop: a session over a Ray Train worker's context.

:func:`tlm.model.train.train_loop_per_worker` talks to its surroundings through a session
(batches, model placement, reports, restore); this is the one that makes it a Ray Train
worker: dataset shards (``ray.train.get_dataset_shard``), DDP (``prepare_model``),
``ray.train.report`` with a checkpoint, and ``ray.train.get_checkpoint`` on restart. It lives
here, next to the launcher (:mod:`cluster.train_job`), because only ``cluster/`` imports Ray.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator


def ray_train_loop(config: dict) -> None:
    """The body of every Ray Train worker: the TLM's training loop in a :class:`RayTrainSession`."""
    from tlm.model.train import train_loop_per_worker

    train_loop_per_worker({**config, "session": RayTrainSession(config.get("resume_from"))})


class RayTrainSession:
    """Inside a Ray Train worker: dataset shards, DDP, ``ray.train.report`` and restore.

    ``resume_from``: the newest complete checkpoint on disk when the run started (chosen once
    by the driver, so every rank resumes from the same one); restore takes it over Ray's own
    checkpoint when it is newer (:func:`tlm.model.checkpoint.newer_checkpoint`).
    """

    def __init__(self, resume_from: str | None = None) -> None:
        import ray.train

        ctx = ray.train.get_context()
        self.world_rank, self.world_size = ctx.get_world_rank(), ctx.get_world_size()
        self.resume_from = resume_from

    def has(self, split: str) -> bool:
        import ray.train

        try:
            return ray.train.get_dataset_shard(split) is not None
        except (KeyError, ValueError):
            return False

    def batches(self, split: str, batch_size: int, *, seed: int | None, drop_last: bool) -> Iterator[dict]:
        import ray.train

        shard = ray.train.get_dataset_shard(split)
        shuffle = {"local_shuffle_buffer_size": 4096, "local_shuffle_seed": seed} if seed is not None else {}
        yield from shard.iter_batches(batch_size=batch_size, batch_format="numpy", drop_last=drop_last, **shuffle)

    def prepare(self, model: Any) -> tuple[Any, Any]:
        """DDP-wrapped and on this worker's device (before the optimizer sees it)."""
        import ray.train.torch

        return ray.train.torch.prepare_model(model), ray.train.torch.get_device()

    @contextlib.contextmanager
    def restored(self) -> Iterator[str | None]:
        import ray.train

        from tlm.model.checkpoint import newer_checkpoint

        ckpt = ray.train.get_checkpoint()
        with ckpt.as_directory() if ckpt is not None else contextlib.nullcontext(None) as d:
            yield newer_checkpoint(d, self.resume_from)

    def report(self, metrics: dict, checkpoint_dir: str | None) -> None:
        import ray.train

        ckpt = ray.train.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        ray.train.report(metrics, checkpoint=ckpt)
