"""The service room: writing schedules with a trained model.

* :mod:`.decoding`     - the fast greedy/sampled decoding loop: a KV cache, forced words fed in bulk
* :mod:`.constrained`  - the ``transformers`` LogitsProcessor over the language's legal words (beams)
* :mod:`.generator`    - ``generate``: every live sketch decoded, ranked, proven valid; measuring
  candidates; the closed loop's tuner
* :mod:`.catalog`      - which model serves which hardware key (registered, else shipped)
* :mod:`.whole_model`  - a whole model's schedules (local model or endpoint) as a MetaSchedule database
* :mod:`.api`          - framework-free request handling behind the Ray Serve deployment
* :mod:`.client`       - the HTTP client of a running server
* :mod:`.evaluate`     - the training run's quality hook: greedy schedules of held-out tasks measured
"""
