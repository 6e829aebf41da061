"""Tests of :mod:`planner.cli` (the tree mirrors the package)."""
