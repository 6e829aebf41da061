"""Tests of :mod:`extproc.core.route` (the tree mirrors the package)."""
