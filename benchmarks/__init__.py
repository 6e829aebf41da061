"""Benchmarks of the Token Budget Router (``make bench`` → ``python -m benchmarks.run``).

Speed targets live here, never in unit tests. Every run is bounded, uses loopback only and
kills every process it starts.
"""
