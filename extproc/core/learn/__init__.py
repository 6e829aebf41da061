"""Learning from what the pools report: reading usage of one answer, misroute recovery and its cause,
truncation, batch budgets, the adaptive decision to read a response, and the bounded outcome
vocabularies counted in metrics.
"""
