"""The router's decision core: pure functions and small state machines, no I/O.

Subpackages, along the data flow of one request (a higher one may import a lower one, never the
reverse; import-linter contracts in ``make test``):

- :mod:`.facade`: ``decide(...)`` and ``learn(...)``, the core's two entry points;
- :mod:`.learn`: learning from what the pools report (usage, misroutes, truncation, outcomes);
- :mod:`.route`: choosing the pool (policy, load, model sets, affinity, the decision record);
- :mod:`.estimate`: the token budget (estimator, ratio learner, output reserve, screen);
- :mod:`.request`: reading request bodies (endpoints, messages, media) into ``RequestFeatures``;
- :mod:`.response`: reading ``usage`` from JSON and SSE responses, content decoding;
- :mod:`.text`: counting runs in prompt text (the C counter and its numpy path).

Nothing here imports grpc, envoy, prometheus_client or asyncio (an import-linter contract in
``make test``): the Envoy adapter and the service call into the core and record what it returns.
"""
