"""cluster: the top layer. Everything that touches Ray, and the ``tlm`` command line.

* Ray: the collection job (:mod:`.collect_job`) with its Ray session (:mod:`.ray_session`),
  dispatcher (:mod:`.dispatcher`) and collector actor (:mod:`.collector`); node resources
  (:mod:`.resources`); the Ray Train launcher (:mod:`.train_job`) and its worker session
  (:mod:`.train_session`); the Ray Serve deployment (:mod:`.serve`).
* :mod:`cluster.cli`: one module per ``tlm`` command, and the options they share.

Only this package imports Ray (``tests/test_layers.py``).
"""
