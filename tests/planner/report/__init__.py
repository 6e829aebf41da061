"""Tests of :mod:`planner.report` (the tree mirrors the package)."""
