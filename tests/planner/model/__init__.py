"""Tests of :mod:`planner.model` (the tree mirrors the package)."""
