"""Prefix-cache views: vLLM-compatible block hashing, the estimated index, the exact index from KV events."""
