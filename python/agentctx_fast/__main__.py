"""``python -m agentctx_fast``: the ``agentctx`` command."""

import sys

from agentctx_fast.cli.main import main

sys.exit(main())
