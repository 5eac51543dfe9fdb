"""``python -m cometmq``: the ``cometmq`` command."""

import sys

from cometmq.cli import main

sys.exit(main())
