"""The proxy's HTTP API as an OpenAPI 3.0 document (served at GET /openapi.json).

It describes what the proxy itself reads from a request (the OpenAI fields it parses, the
session and request-id headers) and what it answers; every other body field is passed to the
engine untouched (`additionalProperties`). The reliability suite fuzzes the proxy from this
document with schemathesis (tests/reliability/test_fuzz_http.py).
"""

from __future__ import annotations

from typing import Any

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"nullable": True},
                "code": {"type": "integer"},
            },
        }
    },
}


def _error(desc: str) -> dict[str, Any]:
    return {"description": desc, "content": {"application/json": {"schema": _ERROR}}}


_COMMON = {
    "model": {"type": "string"},
    "max_tokens": {"type": "integer", "minimum": 0},
    "stream": {"type": "boolean"},
    "stream_options": {
        "type": "object",
        "properties": {"include_usage": {"type": "boolean"}},
    },
    "session_id": {"type": "string"},
    "user": {"type": "string"},
}
_PROMPT = {
    "oneOf": [
        {"type": "string", "minLength": 1},
        {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}},
    ]
}
_MESSAGES = {
    "type": "array",
    "minItems": 1,
    "items": {
        "type": "object",
        "required": ["role", "content"],
        "properties": {
            "role": {"type": "string", "enum": ["system", "user", "assistant"]},
            "content": {"type": "string"},
        },
    },
}
_HEADERS = [
    {"name": "x-session-id", "in": "header", "required": False, "schema": {"type": "string"}},
    {"name": "x-request-id", "in": "header", "required": False, "schema": {"type": "string"}},
]
_GENERATED = {
    "200": {
        "description": "The engine's answer, relayed (JSON, or an SSE stream when stream=true)",
        "content": {"application/json": {"schema": {"type": "object"}}},
    },
    "400": _error("The request cannot be read (bad JSON, types, missing prompt)"),
    "401": _error("Missing or wrong API key (only with --api-key)"),
    "404": _error("Unknown model (from the engine)"),
    "405": _error("Wrong method"),
    "502": _error("The engine refused or dropped the request"),
    "503": _error("No healthy engine"),
    "504": _error("The engine timed out"),
}


def _generate(summary: str, prompt_field: str, prompt: dict[str, Any]) -> dict[str, Any]:
    body = {
        "type": "object",
        "required": [prompt_field],
        "properties": {prompt_field: prompt, **_COMMON},
        "additionalProperties": True,
    }
    return {
        "post": {
            "summary": summary,
            "parameters": _HEADERS,
            "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
            "responses": _GENERATED,
        }
    }


OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "agentic_kvc proxy", "version": "1"},
    "paths": {
        "/v1/completions": _generate("Text completion, routed by the policy", "prompt", _PROMPT),
        "/v1/chat/completions": _generate("Chat completion, routed", "messages", _MESSAGES),
        "/v1/messages": _generate(
            "Anthropic Messages API (Claude Code), routed; vLLM serves it", "messages", _MESSAGES
        ),
        "/v1/models": {
            "get": {
                "summary": "The engines' models",
                "responses": {
                    "200": {
                        "description": "From the first healthy engine",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    "401": _error("Missing or wrong API key"),
                    "503": _error("No healthy engine"),
                },
            }
        },
        "/health": {
            "get": {
                "summary": "Engines' health",
                "responses": {
                    "200": {"description": "Some engine is healthy"},
                    "503": {"description": "None is"},
                },
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "responses": {"200": {"description": "Text exposition format"}},
            }
        },
    },
}
