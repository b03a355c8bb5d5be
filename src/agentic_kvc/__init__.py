"""agentic_kvc: a workbench for routing multi-turn agentic requests across vLLM instances."""

__version__ = "0.1.0"
