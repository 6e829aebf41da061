"""The Envoy edge: the only code that imports ``envoy.*`` and ``grpc``.

Prebuilt ext_proc replies (:mod:`.responses`), header conversion (:mod:`.headers`), the
per-stream state machine (:mod:`.processor`), the per-config runtime (:mod:`.runtime`) and the
grpc.aio servicer (:mod:`.server`).
"""
