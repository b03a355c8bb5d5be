"""predicted_ttft with `opening: near_tie_ttft` against today's and the best peer (issue 29 goal 2).

docs/kv_tiers/study_followups.md, TraceLab part, section 10. `near_tie` (section 9) closed the
TraceLab x2 gap to sticky_least_loaded but lost E2E p90 (and on Mooncake 8 x H20 TTFT p90) on
the held-out workloads: its band, this opening's own idle prefill, grows with the prompt and
was applied to the whole score, so a near-tie could carry a heavier decode load than the best.
`near_tie_ttft` applies the band to the score less its decode term and admits only candidates
whose decode term is no larger than the best's. The cells: section 9's (benchmarks/
tiers_opening_near_tie.py, `cells()` of tiers_opening_lifetime.py), and four held out, chosen
before any run of this variant, none run before with a near-tie rule:

- agentic-long on 8 x H20 at 0.2 sessions/s (60 sessions, the study's Pareto tail), host 128
  GiB, seeds 0-4;
- the `agentic-coding` preset (8 x H20, 200 sessions) at 0.75 sessions/s, host 128 GiB, seeds
  0-4;
- TraceLab at arrivals x1.5 (between the study's two loads), host 16 GiB, seeds 0-10 of the
  session jitter;
- the Mooncake trace on 4 x H20 at x0.15, host 16 GiB, the three windows;

and the study's agentic-long 0.05 sessions/s cell at 128 GiB over seeds 0-30, where today's
predicted_ttft trails sticky_least_loaded (+3.7% [+0.3, +7.1], "Thirty-one seeds").

Added 2026-11-29 21:50 UTC, before any run of this variant on them: the four cells of
`tiers_agentic_seeds.py --part deployments` (Llama-3.1-8B on 4 x H100 and on 4 x H20, 0.1 and
0.2 sessions/s; docs/kv_tiers/study_followups.md, "Two deployments no issue names"), host 128
GiB, seeds 0-10: held out for this rule, fixed since section 10 (`--only deploy_`).

    nice -n 10 .venv/bin/python benchmarks/tiers_opening_near_tie_ttft.py \\
        --results /tmp/akvc_k10_results --out results/bench/tiers_opening_near_tie_ttft.json

The analysis and table are section 9's (benchmarks/tiers_opening_near_tie.py), the variant
labelled `near_tie_ttft`; REPORT.md's Benchmarks section reads the archived file
(results/archive/bench/).
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any

from agentic_kvc.config import override_item

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiers_agentic_seeds import deployments_part
from tiers_opening_lifetime import DYNAMO, STICKY, TODAY, cells
from tiers_opening_near_tie import analyse, table
from tiers_sweep import WINDOWS, Run, cell_runs, per_host, study
from tiers_sweep import main as sweep

LABEL = "near_tie_ttft"
NEAR_TIE_TTFT = {"name": "predicted_ttft", "params": {"opening": "near_tie_ttft"}}
PEERS = {"sticky_least_loaded": STICKY, "dynamo_kv": DYNAMO}


def heldout() -> list[dict[str, Any]]:
    """The four held-out cells and the 31-seed agentic-long cell (module docstring)."""
    long8 = study("tiers_agentic_hi")
    long8["set"].update({"fleet.instances": 8, "workload.generator.params.session_rate_per_s": 0.2})
    trace15 = study("tiers_tracelab_hi")
    trace15["set"]["workload.rate_scale"] = 1.5
    moon = study("tiers_mooncake_lo")
    moon["set"]["workload.rate_scale"] = 0.15
    return [
        {
            "name": "new_agentic-long_8xH20_0.2",
            **long8,
            "rep": ("seed", list(range(5))),
            "hosts": [128],
            "peers": PEERS,
        },
        {
            "name": "new_agentic_0.75",
            "base": "config/runs/sim_h20_agentic.yaml",
            "set": {"workload.generator.params.session_rate_per_s": 0.75},
            "rep": ("seed", list(range(5))),
            "hosts": [128],
            "peers": PEERS,
        },
        {
            "name": "new_tracelab_x1.5",
            **trace15,
            "rep": ("seed", list(range(11))),
            "hosts": [16],
            "peers": PEERS,
        },
        {
            "name": "new_mooncake_x0.15",
            **moon,
            "rep": ("workload.window_s", WINDOWS),
            "hosts": [16],
            "peers": PEERS,
        },
        *deployments(),
        {
            "name": "agentic-long_0.05_31seeds",
            **study("tiers_agentic_lo"),
            "rep": ("seed", list(range(31))),
            "hosts": [128],
            "peers": {"sticky_least_loaded": STICKY},
        },
    ]


def deployments() -> list[dict[str, Any]]:
    """tiers_agentic_seeds.py's deployment cells (module docstring), host 128 GiB."""
    return [
        {
            "name": exp["name"],
            "base": exp["base"],
            "set": exp["set"],
            "rep": ("seed", list(range(11))),
            "hosts": [128],
            "peers": PEERS,
        }
        for exp in deployments_part(11)
    ]


def specs(cell: dict[str, Any], host: float) -> list[Run]:
    """(variant, replicate, overrides) of one cell and host size."""
    pols = {"today": TODAY, LABEL: NEAR_TIE_TTFT, **cell["peers"]}
    return cell_runs(cell, pols, [override_item("fleet.kv_tiers.host_gib", host)])


def main() -> int:
    return sweep(
        "tiers_opening_near_tie_ttft",
        __doc__,
        Path("/tmp/akvc_k10_results"),
        lambda: per_host([*heldout(), *cells()], specs),
        partial(analyse, label=LABEL),
        partial(table, label=LABEL),
    )


if __name__ == "__main__":
    raise SystemExit(main())
