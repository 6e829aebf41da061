"""The token budget: the estimator (request features → prompt-token estimate from the run counts and the
learned model-to-true ratio), the ratio learner and store protocol, the output reserve and its learner,
and the byte-bound screen that skips counting for short prompts.
"""
