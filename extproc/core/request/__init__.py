"""Reading request bodies: the endpoint table (path → body parser → usage shape), the OpenAI
chat/completions, Responses, Anthropic Messages and batch bodies as vLLM's chat template sees them, and
the media parts (image sizes, audio clips) with their per-model rules. Produces
:class:`~extproc.core.request.request_body.RequestFeatures`; imports only the text counter.
"""
