"""Tests of :mod:`extproc.core.text` (the tree mirrors the package)."""
