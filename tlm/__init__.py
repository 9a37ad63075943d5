"""tlm: the tensor language model.

Modules, in the order data flows through them:

* ``space``       - every sketch of a (task, hardware) and the choices it leaves open
* ``numbers``     - how integers are written (words up to 1024, spelled digits above)
* ``replay``      - incremental replay of a sketch, pausing at each choice (live domains)
* ``language``    - ``encode``/``decode`` between traces and sentences; ``legal_next_tokens``
* ``gpu``         - thread-extent constraints that keep CUDA sentences within VerifyGPUCode
* ``constrained`` - the LogitsProcessor and the no-repair + postprocessor check
* ``tokenizer``   - WordLevel tokenizer over the language's own vocabulary
* ``hardware``    - prompt facts derived from a stored TVM target
* ``dataset``     - pretraining / fine-tuning sentence sets from a corpus (Parquet)
"""
