"""Tests of :mod:`extproc.core.learn` (the tree mirrors the package)."""
