"""Tests of :mod:`planner.des` (the tree mirrors the package)."""
