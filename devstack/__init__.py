"""The one loopback launcher: free ports, managed processes whose logs are shown only on
failure, Envoy rendered from the repository's ``envoy/*.yaml``, the router, stand-in pools and Redis.
Used by the demo, the end-to-end tests, the pool-aware tests, the benchmarks and the soak."""
