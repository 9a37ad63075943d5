"""The tasks a model is judged on: programs it never saw, heaviest first.

Every distinct workload of the zoo's held-out models (``collectors.zoo.HELD_OUT_MODELS``: never
in a training split) at full size, plus every task of one ViT-B/16 encoder layer, a model
outside the zoo. The quality, reference and serving benchmarks take their tasks from here, so
they judge on one set.
"""
from __future__ import annotations

import json
import os
from typing import Any, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "data", "corpus")
OUTSIDE_MODEL = "vit_b16_layer"
OUTSIDE_DESCRIPTION = "vit_b16_layer (HF ViTModel, 1 encoder layer, 224x224, random weights)"


def judging_set(hw: Any, *, corpus_dir: str | None = None, max_tasks: int | None = None,
                held_out: Sequence[str] | None = None, outside: bool = True) -> list:
    """The tasks a model is judged on, heaviest first (FLOPs x weight).

    Every distinct workload of the held-out zoo models, at full size, from the corpus index
    (the same rule as the dataset's test split: a workload that occurs in any held-out model),
    each with ``weight`` = its occurrences in those models and ``weights`` = per model (for the
    whole-model latency); plus, with ``outside``, every task of one ViT-B/16 encoder layer (a
    model outside the zoo) whose workload the corpus has no record of in a training model.
    ``max_tasks``: only the N heaviest.
    """
    from collectors.tasks import heaviest_first, task_from_index
    from collectors.zoo import HELD_OUT_MODELS
    from storage import Corpus
    from tlm.model.dataset import split_of

    held = set(held_out or HELD_OUT_MODELS)
    with Corpus.open(corpus_dir or CORPUS) as corpus:
        rows = corpus.workloads()
    out, trained_on = [], set()
    for w in rows:
        models = w.get("models") or {}
        if split_of(models, held) == "train":
            trained_on.add(w["workload_key"])
            continue
        out.append(_weighted(task_from_index(w), {m: int(n) for m, n in models.items() if m in held}))
    if outside:
        for t in vit_tasks(hw):
            if t.workload_key not in trained_on:
                out.append(_weighted(t, {t.model: t.weight}))
    out.sort(key=heaviest_first)
    return out[:max_tasks] if max_tasks else out


#: The op kinds whose search has something to find (tiles, orders, parallel and vector loops):
#: the teacher's quality is judged on these; a norm or a pool is a few sketches and no search.
SEARCHED_KINDS = ("conv2d", "conv1d", "matmul", "dense", "batch_matmul")


#: The training sample each key's rounds are judged on, pinned when first judged (:func:`pin_sample`).
SAMPLE_PINS = os.path.join(ROOT, "bench", "results", "training_sample.json")


def training_sample(hardware_key: str, *, corpus_dir: str | None = None, n: int = 16,
                    held_out: Sequence[str] | None = None, pins: str = SAMPLE_PINS) -> list:
    """A fixed sample of ``n`` training workloads the corpus measured on ``hardware_key``: the
    teacher's quality (its best programs against MetaSchedule@256) is judged on it, round after
    round (issue 32, items 3-4). Workloads of a training split only (never one that occurs in a
    held-out model), of a searched kind (:data:`SEARCHED_KINDS`), taken in workload-key order (a
    hash: a sample that mixes sizes and models).

    Fixed means pinned: a round's search measures workloads the corpus lacked, and one whose key
    sorts first would push a judged workload out of the sample (and cost a new 256-trial reference
    search) between two rounds that must be compared on the same workloads. So the workloads in
    ``pins`` for the key come first, in their order, and only the rest are drawn (:func:`pin_sample`
    writes them there: the teacher's judgements and the reference searches do). A pinned workload
    the corpus lacks is an error that names it."""
    from collectors.tasks import task_from_index
    from collectors.zoo import HELD_OUT_MODELS
    from storage import Corpus
    from tlm.model.dataset import split_of

    held = set(held_out or HELD_OUT_MODELS)
    with Corpus.open(corpus_dir or CORPUS) as corpus:
        rows, measured = corpus.workloads(), corpus.best_latencies(hardware_key)
    eligible = {w["workload_key"]: w for w in rows if w["workload_key"] in measured
                and w.get("op_kind") in SEARCHED_KINDS and split_of(w.get("models") or {}, held) == "train"}
    pinned = _read_pins(pins).get(hardware_key, [])
    lost = [k for k in pinned[:n] if k not in eligible]
    if lost:
        raise ValueError(f"the pinned training sample of {hardware_key} ({pins}) has workloads this corpus "
                         f"has no training record of on that key: {', '.join(lost)}")
    chosen = (pinned + sorted(k for k in eligible if k not in pinned))[:n]
    out = []
    for key in chosen:
        w = eligible[key]
        t = task_from_index(w)
        t.weights = {m: int(c) for m, c in (w.get("models") or {}).items()}
        t.weight = sum(t.weights.values()) or 1
        out.append(t)
    return out


def pin_sample(hardware_key: str, tasks: Sequence[Any], pins: str = SAMPLE_PINS) -> None:
    """Pin ``tasks`` (a :func:`training_sample`, in its order) as the key's sample, when it adds to the pins."""
    saved = _read_pins(pins)
    pinned, keys = saved.get(hardware_key, []), [t.workload_key for t in tasks]
    if len(keys) > len(pinned) and keys[: len(pinned)] == pinned:
        saved[hardware_key] = keys
        with open(pins, "w") as f:
            json.dump(saved, f, indent=1, sort_keys=True)
            f.write("\n")


def _read_pins(path: str) -> dict[str, list[str]]:
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def vit_tasks(hw: Any, graph: Any = None) -> list:
    """Every task of one ViT-B/16 encoder layer (HF ``ViTModel``, random weights, 224x224), cut
    from ``graph`` (``collectors.tasks.Graph``; default the exported graph)."""
    import torch
    from transformers import ViTConfig, ViTModel

    from collectors.tasks import EXPORTED, extract_tasks

    torch.manual_seed(0)
    model = ViTModel(ViTConfig(num_hidden_layers=1), add_pooling_layer=False).eval()
    args = (torch.randn(1, 3, 224, 224),)
    return extract_tasks((model, args), hw, model_name=OUTSIDE_MODEL, graph=graph or EXPORTED)


def _weighted(task: Any, weights: dict[str, int]) -> Any:
    """``task`` judged with ``weights`` (its occurrences per held-out model): ``weight`` their sum,
    ``model`` the one it occurs in most (a whole model's latency sums ``weights``)."""
    task.weights = weights
    task.model = max(weights, key=weights.get)
    task.weight = sum(weights.values())
    return task


#: sequence length of the transformers a deployer compiles (``tlm compile``'s default)
COMPILE_SEQ_LEN = 128


def compiled_judging_set(hw: Any, *, max_tasks: int | None = None, outside: bool = True) -> list:
    """The judging set as a deployer's compile meets it, heaviest first: every distinct task of the
    held-out zoo models cut from the graph ``tlm compile`` builds (``collectors.tasks.COMPILED``:
    batch norms folded, weights prepacked; transformers at sequence :data:`COMPILE_SEQ_LEN`), and
    with ``outside`` the ViT layer's the same way. No such workload is in a training split: a
    prepacked task is another workload than any the corpus collects by default. ``weight`` and
    ``weights`` as in :func:`judging_set`."""
    from collectors.tasks import COMPILED, extract_tasks, heaviest_first
    from collectors.zoo import HELD_OUT_MODELS, build_model

    found = []
    for name in HELD_OUT_MODELS:
        module, args = build_model(name, seq_len=COMPILE_SEQ_LEN)  # a CNN has no sequence
        found += extract_tasks((module, args), hw, model_name=name, graph=COMPILED)
    if outside:
        found += vit_tasks(hw, COMPILED)
    by_key: dict[str, tuple[Any, dict[str, int]]] = {}
    for t in found:  # a workload of two models (the ViT's and BERT's softmax) once, its occurrences per model
        _, weights = by_key.setdefault(t.workload_key, (t, {}))
        weights[t.model] = weights.get(t.model, 0) + t.weight
    out = [_weighted(t, weights) for t, weights in by_key.values()]
    out.sort(key=heaviest_first)
    return out[:max_tasks] if max_tasks else out


#: Models outside the zoo whose subgraphs form the "never worse than the simple answers" set:
#: the kinds of task a zoo-trained model meets least (depthwise and patchify convolutions,
#: layer and RMS norms, 1-D convolutions, softmax), each a small HF config with random weights.
OUTSIDE_ZOO = ("convnext_1block", "t5_encoder_layer", "whisper_encoder_layer")
#: the op kinds taken from each of them (the heaviest task of each kind)
OUTSIDE_KINDS = ("matmul", "conv2d", "conv1d", "norm", "reduction", "softmax")


def outside_zoo_tasks(hw: Any, *, corpus_dir: str | None = None) -> list:
    """The heaviest task of each kind in :data:`OUTSIDE_KINDS` from each model of
    :data:`OUTSIDE_ZOO` (plus ConvNeXt's 4x4 stride-4 patchify convolution), leaving out any
    workload the corpus holds (it could have been trained on), heaviest first."""
    import torch
    import transformers as hf

    from collectors.tasks import extract_tasks, heaviest_first
    from storage import Corpus

    with Corpus.open(corpus_dir or CORPUS) as corpus:
        known = {w["workload_key"] for w in corpus.workloads()}
    torch.manual_seed(0)
    models = {
        "convnext_1block": (hf.ConvNextModel(hf.ConvNextConfig(depths=[1, 1, 1, 1])), (torch.randn(1, 3, 224, 224),)),
        "t5_encoder_layer": (hf.T5EncoderModel(hf.T5Config(num_layers=1, d_model=512, d_ff=2048, num_heads=8)),
                             (torch.randint(0, 100, (1, 128)),)),
        "whisper_encoder_layer": (hf.WhisperModel(hf.WhisperConfig(
            encoder_layers=1, decoder_layers=1, d_model=384, encoder_attention_heads=6, decoder_attention_heads=6,
            max_source_positions=250)).encoder, (torch.randn(1, 80, 500),)),
    }
    out = []
    for name in OUTSIDE_ZOO:
        model, args = models[name]
        tasks = [t for t in extract_tasks((model.eval(), args), hw, model_name=name) if t.workload_key not in known]
        tasks.sort(key=lambda t: (-(t.flops or 0), t.task_name))
        picked = [next(t for t in tasks if t.op_kind == k) for k in OUTSIDE_KINDS if any(t.op_kind == k for t in tasks)]
        if name == "convnext_1block":  # the stem: a 4x4, stride-4 patchify convolution
            picked += [t for t in tasks if t.op_kind == "conv2d" and t.task_name == "fused_conv2d_add" and t not in picked]
        for t in picked:
            t.weights = {name: t.weight}
        out += picked
    out.sort(key=heaviest_first)
    return out


def check_unseen(model_id: str, model_info: dict, tasks: Sequence[Any]) -> None:
    """Refuse (``ValueError``) to judge a model on tasks of a zoo model it was trained on: every
    zoo model the judging set draws from must be among the ``held_out_models`` the model records
    (``tlm_model.json``); a model that records none cannot show it never saw them."""
    held = set(model_info.get("held_out_models") or [])
    judged = {m for t in tasks for m in getattr(t, "weights", {t.model: t.weight}) if m != OUTSIDE_MODEL}
    seen = sorted(judged - held)
    if seen:
        raise ValueError(f"model {model_id} was not held out from {', '.join(seen)} (its held-out models: "
                         f"{', '.join(sorted(held)) or 'none recorded'}): judging it on their tasks would judge "
                         "it on its training data")


def cnn_tasks(hw: Any, keep: Any, folded: Sequence[str] = ("mobilenetv2", "efficientnet_b0")) -> list:
    """Every distinct task of the zoo's convolutional models that ``keep(task)`` accepts: the
    graphs the corpus collects (full size) and, for ``folded``, the graphs ``tlm compile`` builds
    (batch norms folded into the convolutions: other workloads). For the rules' studies, which
    judge a rule on every task it changes."""
    from collectors.tasks import extract_tasks, import_relax
    from collectors.zoo import CNN_MODELS, build_model

    graphs: list = [(m, None, None) for m in CNN_MODELS]
    for m in folded:
        module, args = build_model(m)
        graphs.append((m, (module, args), import_relax(module, args, fold_batch_norm=True)))
    seen, out = set(), []
    for name, model, mod in graphs:
        tasks = extract_tasks(name, hw) if mod is None else extract_tasks(model, hw, model_name=name, relax_mod=mod)
        for t in tasks:
            if t.workload_key not in seen and keep(t):
                seen.add(t.workload_key)
                out.append(t)
    return out
