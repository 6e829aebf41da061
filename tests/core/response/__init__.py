"""Tests of :mod:`extproc.core.response` (the tree mirrors the package)."""
