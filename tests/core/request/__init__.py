"""Tests of :mod:`extproc.core.request` (the tree mirrors the package)."""
