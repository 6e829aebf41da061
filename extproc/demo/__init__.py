"""`tbr demo` and the real-process test harness: start mock pools, the router and Envoy on
loopback, replay real requests through Envoy with the ``openai`` client, summarise routing.

Modules: :mod:`.procs` (free ports, managed child processes), :mod:`.envoy_runner` (render
``envoy/envoy.yaml`` for loopback, run Envoy), :mod:`.stack` (the whole set, in start order),
:mod:`.workload` (requests from ``../shared/data`` or the built-in sample), :mod:`.replay`
(send them), :mod:`.summary` (the report).
"""
