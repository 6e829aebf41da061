"""Stand-in vLLM pool: an OpenAI-compatible server that counts prompt tokens with a real tokenizer."""
