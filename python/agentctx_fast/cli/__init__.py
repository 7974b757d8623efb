"""The ``agentctx`` command."""
