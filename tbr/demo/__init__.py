"""`tbr demo`: replay real requests through Envoy with the ``openai`` client on a
:mod:`devstack` stack and summarise routing.

Modules: :mod:`.workload` (requests from ``../shared/data`` or the built-in sample),
:mod:`.replay` (send them), :mod:`.summary` (the report), :mod:`.builtin_sample`.
"""
