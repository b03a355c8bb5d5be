"""Routing policies: pure decision functions over a fleet view, shared by proxy and simulator."""

from agentic_kvc.policy.base import Decision, FleetView, InstanceView, Policy, RequestView
from agentic_kvc.policy.registry import get_policy, list_policies, validate_policy

__all__ = [
    "Decision",
    "FleetView",
    "InstanceView",
    "Policy",
    "RequestView",
    "get_policy",
    "list_policies",
    "validate_policy",
]
