"""Baselines the evaluation compares the router's estimator with (not used by the router).

* :mod:`evaluation.baselines.bytes_model`: the ``bytes`` cost model, one bytes/token ratio per
  content category (the paper's estimator and the router's model before it counted runs), with its
  content classifier (:mod:`.categories`) and cold-start priors (:mod:`.priors`).
"""
