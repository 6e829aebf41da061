"""The ``tbr serve`` process: wiring (:mod:`.app`), Prometheus metrics (:mod:`.metrics`), the admin
HTTP server (:mod:`.admin`), JSON logs (:mod:`.logs`), config reload (:mod:`.reload`), the shared
Redis ratio store (:mod:`.redis_store`) and the vLLM metrics scraper (:mod:`.scrape`)."""
