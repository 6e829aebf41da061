"""Tests of :mod:`planner.workload` (the tree mirrors the package)."""
