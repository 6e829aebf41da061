"""Closed forms and fitted inputs: the cost model (M/G/c, throughput, TTFT floors), the live advice, pool
profiles and their files and fits, output reserves and vLLM arguments. No simulator, no trace I/O.
"""
