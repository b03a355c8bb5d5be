"""Workloads: the canonical session/request model, trace readers, the generator, token synthesis."""

from agentic_kvc.workload.model import Block, Request, Session, Workload

__all__ = ["Block", "Request", "Session", "Workload"]
