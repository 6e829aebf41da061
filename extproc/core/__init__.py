"""The router's decision core: pure functions and small state machines, no I/O.

Request parsing (:mod:`.request_body`), the text profile (:mod:`.categories`), cold priors
(:mod:`.priors`), the token-budget estimator (:mod:`.estimator`), the online ratio learner and the
ratio-store protocol (:mod:`.calibration`), the routing policy (:mod:`.policy`), pool load
(:mod:`.load`), misroute recovery (:mod:`.recovery`), usage parsing (:mod:`.sse`), content
decoding (:mod:`.encoding`) and the decision record (:mod:`.decision`).

Nothing here imports grpc, envoy, prometheus_client or asyncio (an import-linter contract in
``make test``): the Envoy adapter and the service call into the core and record what it returns.
"""
