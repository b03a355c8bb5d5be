"""vLLM's NIXL connector with the worker's threads kept on their instance's own cores (CPU).

`kv_transfer_config` names this module in `kv_connector_module_path` for every NIXL fleet on
CPU; vLLM's factory then takes the class `NixlConnector` from here. The name is unchanged, so
vLLM's config checks that look for "NixlConnector" still apply. No vLLM source is patched.

Why: vLLM's NIXL worker on CPU pins the thread that builds it to the machine's last core, the
same core on every instance (`serve.cpu_pinning`). On a 2-core machine P's busy-waiting main
thread then shares D's core: about one PD request in four waited ~30 s and D read blocks P had
already released ("Potentially invalid KV blocks"). GPU fleets keep vLLM's own class.

`AKVC_NIXL_REPIN=0` in an engine's env (e.g. `--set fleet.vllm_env.AKVC_NIXL_REPIN="0"`, which
also gives the run its own id) keeps vLLM's pinning: the control that measures the re-pin.
"""

from __future__ import annotations

import os
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector import (
    NixlConnector as _VllmNixlConnector,
)

from agentic_kvc.serve.cpu_pinning import repin_worker

REPIN_ENV = "AKVC_NIXL_REPIN"


class NixlConnector(_VllmNixlConnector):
    """vLLM's NIXL (pull) connector; its worker's threads go back to the instance's cores."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        # The cores the worker's threads were put back on ([]: scheduler side, or no binding).
        self.repinned_cores: list[int] = []
        if self.connector_worker is not None and os.environ.get(REPIN_ENV, "1") != "0":
            self.repinned_cores = repin_worker()
