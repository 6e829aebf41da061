"""Tests of :mod:`extproc.core.estimate` (the tree mirrors the package)."""
