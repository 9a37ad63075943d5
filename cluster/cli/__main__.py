"""``python -m cluster.cli``: the ``tlm`` command without the console script."""
import sys

from cluster.cli import main

sys.exit(main())
