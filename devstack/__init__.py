"""The one loopback launcher: free ports, managed processes whose logs are shown only on
failure, Envoy rendered from the repository's ``envoy/*.yaml``, the router, stand-in pools and Redis.
Used by the demo, the end-to-end tests, the pool-aware tests, the benchmarks and the soak.

* :mod:`devstack.procs`: ``free_port``, ``ManagedProcess`` (start, wait ready, restart, stop by pid;
  ``StartupError`` carries the log tail).
* :mod:`devstack.envoy_runner`: ``envoy/envoy.yaml`` (or any ``envoy/*.yaml``) loaded and rewritten
  to loopback ports (``render_envoy_config``, ``render_envoy_clusters``, ``set_static_endpoints``),
  ``EnvoyProcess``.
* :mod:`devstack.stack`: ``Stack(work_dir, StackOptions(...))``: ``tbr mock-pool`` pools, the router
  as ``tbr serve`` (config/router.yaml rendered, ``router_overrides`` merged; restartable), Envoy;
  ``add_envoy`` for a second Envoy on the same pools (e.g. router down), ``router_metric``.
* :mod:`devstack.inprocess`: ``inprocess_stack(...)``: N stand-in pools and the real ``RouterApp`` in
  the caller's event loop, Envoy as a child (the pool-aware tests).
* :mod:`devstack.fixed_upstream`: an Envoy answering fixed OpenAI JSON (``direct_response``), the
  stand-in pool of the benchmarks and the soak.
* :mod:`devstack.redis`: ``RedisServer``, a throwaway ``redis-server`` on loopback.

Example (the end-to-end fixtures)::

    with Stack(tmp, StackOptions(decision_log=True)) as stack:
        httpx.post(f"{stack.base_url}/chat/completions", json=body)
        down = stack.add_envoy(router_grpc=free_port(), tag="envoy-router-down")
"""
