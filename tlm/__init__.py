"""tlm: the tensor language model, in three rooms that depend one way (service → model → language).

* :mod:`tlm.language` - the tensor language: design spaces, sentences ⇄ traces, the legal next
  words, the proof that a sentence is a valid program. TVM only (no torch).
* :mod:`tlm.model`    - the GPT-2 that learns it: tokenizer, training sets from a corpus,
  batching and the decision-only loss, the training loop, checkpoints, scoring.
* :mod:`tlm.service`  - writing schedules with a trained model: the constrained generator, which
  model serves which hardware, whole-model schedules, request handling and its HTTP client, the
  quality hook of a training run.

``tests/test_layers.py`` holds the rooms; ``docs/ARCHITECTURE.md`` is the map.
"""
