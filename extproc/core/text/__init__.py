"""Counting runs in prompt text: the run kinds, their rules and per-language word sets, the one-pass
counter (the C extension ``_runscan`` with a numpy path of the same counts) and the fitted token cost of
each run kind (``run_costs.json``). Imports nothing else of the core.
"""
