"""Token Budget Router: an Envoy ext_proc service that routes OpenAI-compatible LLM requests
to a short or a long vLLM pool by each request's estimated total token budget."""

__version__ = "0.1.0"
