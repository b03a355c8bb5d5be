"""Prefix-cache views: block hashing, the estimated index, the exact index from KV events."""
