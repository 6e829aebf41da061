"""Reading responses: ``usage`` and finish reasons from JSON and SSE bodies of every endpoint, and
``content-encoding`` decoding. Imports nothing else of the core.
"""
