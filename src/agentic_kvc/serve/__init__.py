"""Launching and stopping real servers: vLLM instances, Redis, the proxy."""
