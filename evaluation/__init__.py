"""Offline evaluation of the token-budget estimator on real multilingual chat traffic.

``corpus`` rebuilds the real request bodies (docs/data.md §2.2), ``groundtruth`` counts their
prompt tokens with the real tokenizers and chat templates, ``replay`` runs them through the
router's own parser, estimator and calibration, and ``report`` renders the tables printed by
``tbr eval-estimator``.
"""
