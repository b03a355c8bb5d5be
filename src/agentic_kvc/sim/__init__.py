"""A discrete-event model of a vLLM fleet that runs the same policy objects as the proxy."""
