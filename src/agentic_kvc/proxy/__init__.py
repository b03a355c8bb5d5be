"""The cache-aware, OpenAI-compatible routing proxy (ASGI) in front of vLLM instances."""
