"""The pure-Python reference of the Rust core: same functions, same results, same errors.

It is importable on every platform and is what ``AGENTCTX_FAST_BACKEND=python`` runs.
"""
