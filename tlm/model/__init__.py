"""The model room: the GPT-2 that learns the tensor language (torch, transformers).

* :mod:`.network`    - presets, ``ModelConfig``, building, saving and loading a model directory
* :mod:`.tokenizer`  - the WordLevel tokenizer over the language's own vocabulary
* :mod:`.dataset`    - pretraining / fine-tuning sentence sets from a corpus (Parquet), the split
* :mod:`.batching`   - sentences as batches; labels that count decisions only; the masked loss
* :mod:`.train`      - the training loop (``train_loop_per_worker``) and its session protocol
* :mod:`.checkpoint` - pickle-free checkpoints (weights, optimizer moments, loop position)
* :mod:`.scoring`    - how likely a model finds a schedule (log-probability of its decisions)
* :mod:`.cached_forward` - GPT-2's forward on a KV cache without transformers' overhead (decoding)
"""
