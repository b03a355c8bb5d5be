"""The reliability suite's report: faults injected, bad inputs tried, requests lost.

Filled while the suite runs and printed at its end (`make test-reliability` also writes it to
`$AKVC_RELIABILITY_REPORT`):

- faults injected and bad inputs tried: the tests that inject each, by test function name
  (the table in docs/reliability.md), with how many of their cases passed;
- requests lost: every generation request an in-process proxy (`ProxyThread`, the fault,
  fuzz and load cases here) received is counted, and so is every one whose response it ended
  (a complete answer, an error, or an error event closing a stream). A request received and
  never ended, because the proxy raised, hung or was stopped with it in flight, is lost.
  Proxies run as separate processes (`ProxyProcess`) are checked by their tests instead: a
  record for every request sent.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentic_kvc.proxy.app import ProxyApp

# test function name -> the fault it injects (real vLLM where it says so)
FAULTS = {
    "test_kill_mid_stream_then_restart": "engine SIGKILLed mid-stream, then restarted (real vLLM)",
    "test_killed_instance_errors_in_flight_and_rest_go_to_survivor": "engine SIGKILLed under "
    "a replay (real vLLM)",
    "test_client_disconnect_cancels_the_engine_request": "client disconnects mid-stream "
    "(real vLLM)",
    "test_client_gone_closes_a_silent_upstream_at_once": "client disconnects while the "
    "engine is silent",
    "test_engine_4xx_is_relayed_and_never_marks_it_unhealthy": "engine answers 4xx",
    "test_engine_5xx_becomes_a_recorded_error": "engine answers 5xx",
    "test_slow_engine_times_out_into_recorded_504s": "slow engine (no first token; stall)",
    "test_retry_never_goes_back_to_the_instance_that_failed": "engine drops every POST",
    "test_unhealthy_engine_is_probed_and_readmitted": "engine /health and /metrics fail, "
    "then recover",
    "test_engine_failing_fewer_than_n_checks_stays_in_service": "engine fails 2, then 3 "
    "health checks in a row",
    "test_monitor_marks_out_only_after_n_consecutive_failed_checks": "late and refused "
    "health checks (scripted)",
    "test_readmission_does_not_cut_requests_in_flight": "engine marked out and readmitted "
    "mid-stream",
    "test_every_policy_sees_health_in_its_fleet_view": "unhealthy instance in every policy's "
    "fleet view",
    "test_thousand_concurrent_streams_leave_no_fd_or_memory_growth": "1,000 concurrent "
    "streams x 4 rounds",
    "test_fds_return_near_baseline_after_a_burst_of_streams": "burst of 300 concurrent "
    "streams (idle pool cap)",
    "test_interrupted_run_is_incomplete_ignored_and_redone": "`akvc run` interrupted "
    "(SIGINT / SIGKILL)",
    "test_proxy_records_survive_sigkill_under_load_as_whole_lines": "proxy SIGKILLed under load",
    "test_run_files_are_written_whole_or_not_at_all": "crash while writing a results file",
}

# test function name -> the bad input it tries
BAD_INPUTS = {
    "test_bad_bodies_get_4xx_json_errors": "malformed request bodies (per case, per endpoint)",
    "test_unknown_routes_and_methods": "unknown routes and wrong methods",
    "test_api_key_guards_v1_but_not_health": "missing and wrong API keys",
    "test_bad_requests_on_real_engines_are_4xx_json_and_leave_them_healthy": "requests the "
    "engine rejects (real vLLM: over max-model-len, unknown model, ...)",
    "test_schemathesis_no_5xx_and_json_errors": "schemathesis over the proxy's OpenAPI",
    "test_json_trace_readers_fail_only_with_format_errors": "hypothesis: JSON trace rows",
    "test_csv_trace_readers_fail_only_with_format_errors": "hypothesis: CSV trace rows",
    "test_any_bytes_are_a_format_error_or_a_workload": "hypothesis: arbitrary trace bytes",
    "test_config_loader_fails_only_with_config_errors": "hypothesis: config mappings",
    "test_config_files_and_overrides_fail_only_with_config_errors": "hypothesis: config "
    "files and --set overrides",
    "test_a_symlinked_run_directory_cannot_escape_the_results_root": "a run dir symlinked "
    "out of the results root",
    "test_a_run_directory_is_never_reused_for_another_config": "a run dir of another config",
}


@dataclass
class Ledger:
    outcomes: dict[str, dict[str, int]] = field(default_factory=dict)  # test -> outcome -> n
    received: int = 0
    ended: int = 0
    unended: list[str] = field(default_factory=list)

    def outcome(self, name: str, outcome: str) -> None:
        per = self.outcomes.setdefault(name, {})
        per[outcome] = per.get(outcome, 0) + 1

    def lines(self) -> list[str]:
        out = ["Faults injected:"]
        out += self._table(FAULTS)
        out.append("Bad inputs tried:")
        out += self._table(BAD_INPUTS)
        fuzz = os.environ.get("AKVC_FUZZ_EXAMPLES", "50")
        out.append(f"  (hypothesis and schemathesis: up to {fuzz} examples per case)")
        lost = self.received - self.ended
        out.append(
            f"Requests lost: {lost} (in-process proxies received {self.received} generation "
            f"requests and ended {self.ended})"
        )
        out += [f"  never ended: {u}" for u in self.unended[:20]]
        return out

    def _table(self, names: dict[str, str]) -> list[str]:
        rows = []
        for name, what in names.items():
            got = self.outcomes.get(name)
            if not got:
                continue  # not selected in this run
            passed = got.get("passed", 0)
            total = sum(got.values())
            rows.append(f"  {what}: {passed}/{total} passed  [{name}]")
        return rows or ["  (none in this run)"]

    def as_json(self) -> dict[str, Any]:
        return {
            "faults": {n: self.outcomes[n] for n in FAULTS if n in self.outcomes},
            "bad_inputs": {n: self.outcomes[n] for n in BAD_INPUTS if n in self.outcomes},
            "requests_received": self.received,
            "requests_ended": self.ended,
            "requests_lost": self.received - self.ended,
        }


LEDGER = Ledger()

Generate = Callable[..., Awaitable[None]]


def count_requests(original: Generate) -> Generate:
    """Wrap ProxyApp._generate: count each request received and each response ended."""

    async def counted(
        self: ProxyApp, scope: MutableMapping[str, Any], receive: Any, send: Any, path: str
    ) -> None:
        LEDGER.received += 1
        ended = False

        async def watched(msg: MutableMapping[str, Any]) -> None:
            nonlocal ended
            if msg["type"] == "http.response.body" and not msg.get("more_body", False):
                ended = True  # the proxy ended it (a client already gone cannot receive it)
            await send(msg)

        try:
            await original(self, scope, receive, watched, path)
        finally:
            if ended:
                LEDGER.ended += 1
            else:
                LEDGER.unended.append(f"{path} (proxy on {self.settings.engines})")

    return counted


def write(path: str) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(LEDGER.lines()) + "\n")
    target.with_suffix(".json").write_text(json.dumps(LEDGER.as_json(), indent=1) + "\n")


__all__ = ["LEDGER", "count_requests", "write"]
