"""Choosing the pool: the routing policy (smallest pool whose ``max_model_len`` fits the budget, spillover
on saturation), pool load, per-model pool sets, ``previous_response_id`` affinity, the fleet window and
the decision record written per request.
"""
