"""Benchmarks in the report: per file, a few headline figures against their goals.

Each `benchmarks/<name>.py` writes `results/bench/<file>.json` with a `"benchmark": <name>`
field. A summariser registered under that name reads the figures its goal needs and returns
rows (measure, value, goal, verdict); verdicts are recomputed here from the measured values,
not copied from the script's own pass flags. A file of another benchmark gets a few of its
top-level scalar facts; a file that cannot be read, or whose layout its summariser does not
know (an older schema), says so in a row instead of failing the report.

Modules: `core` (the row types, the registry, formatting), `render` (files to rows to the
report's tables), and one module of summarisers per family of benchmarks: `proxy` (the request
path), `inputs` (replay client, trace reading), `environment` (process start-up), `sim` (the
simulator against references and real runs), `policies` (the policy sweeps), `tiers`,
`tier_links` and `prefix_cache` (issue 29);
`engine_variant` holds what the summaries of an engine-side variant on real engines share.

Goals and where they are stated:
- policy_decision: median decision < 200 us, hashing 100k tokens < 5 ms (issue 4; the script's
  `targets`).
- proxy_overhead: akvc `unified` (estimated cache view), short streaming requests, added p50
  <= 1 ms and p99 <= 2 ms over direct (issue 5; docs/proxy.md); and no more added p50 than
  the faster vllm-router target of the same run (the standing goal, README/docs/proxy.md).
- proxy_request_path: none (it explains the cost by prompt length; docs/proxy.md).
- replay_crosscheck: TTFT and E2E p50 of `akvc replay` within 10% of aiperf's (issue 5).
- sim_cache_check: LRU hit rate within 1 point of kvcache-simulator at every budget (issue 7).
- sim_mdl: mean queueing delay within 5% of M/D/1 at every load (issue 7).
- sim_speed: the default agentic workload on 8 instances >= 1,000x real time (issue 7).
- sim_scale: >= 5,000x at 8 instances long-context, >= 200x at 128, the 1,024-instance run in
  < 10 min within 4 GB (issue 16).
- sim_vs_vllm (any file of that benchmark, e.g. a check with `--neighbours N`): simulated
  TTFT/E2E p50/p90 inside the real repeats' range (and within 15% of their mean where the
  script says), prefix-hit tokens exact (issue 16, item 5).
- workload_load: reading and rebuilding the Mooncake trace, median < 5 s (issue 3).
- policy_robustness: each policy of ours never significantly worse than the best peer (TTFT or
  E2E p90) on any workload, and >= 20% lower TTFT p90 on one at E2E p90 not significantly
  worse (issue 18; benchmarks/policy_robustness.py); each variant's paired difference from its
  policy's default form, where significant (no goal: e.g. the step costs fitted online).
- field_pathologies: the predictions registered in docs/policies.md ("Field-reported failure
  modes, reproduced"), each met only if every held-out claim holds: a shared system prompt
  collapses sglang_cache_aware and llmd_weighted onto one instance (and not the others), at a
  TTFT p90 cost; consistent hashing spirals (10x the preemptions, lower hit rate, higher TTFT
  p90 than predicted_ttft). field_pathologies_real: the collapse through the real proxy on two
  vLLM CPU engines, and in the simulator's runs of the same configs: sglang_cache_aware's busiest
  engine >= 0.75 of the requests in every seed, predicted_ttft's <= 0.65 on average.
  field_pathologies_confirm: the confirmatory check's four predictions (docs/policies.md, "A
  confirmatory check on three more deployments"), each met only if it holds in every scenario.
- policy_split: predicted_ttft with split candidates never significantly worse than the same
  policy colocating, nor than the best peer (issue 18; benchmarks/policy_split.py).
- sim_tiers_overhead: the simulator with KV tiers on takes <= 1.5x the CPU time of the same
  run HBM only, in every row (issue 29; benchmarks/sim_tiers_overhead.py).
- tier_recency_real: the simulator's reading of vLLM's SimpleCPUOffloadConnector on a real
  engine: a prompt loaded from the host tier keeps a suffix when partly evicted, one never
  loaded a prefix (issue 29 item 1; docs/kv_tiers.md, "What vLLM 0.32 does").
- tier_view_real: the pre-registered rule of docs/kv_tiers_real.md, section 8: the estimated
  view with the engines' tier (`--tier-view`) expects 0.8-1.2 of the host tokens the real
  engines served over all runs, as the exact view does.
- tier_store_timing_real: the simulator's store-on-eviction against vLLM 0.32's lazy walk on a
  real engine: the host tier holds all of a prompt once HBM evicted it (docs/kv_tiers.md,
  "When the lazy mode stores").
- tier_store_race_real: vLLM 0.32's step order on a real engine (allocations before the lazy
  walk): where the waiting request waited, the host tier keeps what it did not take; elsewhere
  all of the finished prompt (docs/kv_tiers_real.md section 8; the simulator models it).
- tier_view_sim: tier_view_real's 0.8-1.2 band in the simulator, per lazy-store rule and view
  (the estimated view under vLLM's step order is expected outside it: docs/kv_tiers_real.md
  section 8).
- tiers_lazy_store_bound: none (the tiers study's readings when the simulated lazy tier stores
  at eviction, the study's model, and when blocks are freed, the far end of vLLM's walk with
  asynchronous copies: which readings change; docs/kv_tiers/study_followups.md, pre-registered).
- kv_link_copy, kv_link_contention: none (GPU measurements behind the simulator's tier links
  and its FIFO link model; issue 29, docs/kv_tiers.md "Link numbers").
- tiers_agentic_seeds (its seeds and held-out files): goal 1 of issue 29 on the 128 GiB host
  tier, the whole interval at or below -40%, in both readings; predicted_ttft never
  significantly worse than a setup's best peer (goal 2's half these cells can judge).
- tiers_link_misspec, tiers_online_cost: none (what predicted_ttft's lead over the best peer
  with KV tiers needs: exact link numbers, seeing the tiers, the simulator's own step costs;
  issue 29's goal 2, docs/kv_tiers/study_followups.md). The ranked findings read them too.
- finish_first: the pre-registered rule of docs/kv_tiers/pause_aware.md ("Finished sessions
  first"): TTFT p90 significantly lower than the same placement without it for some router and
  cell, TTFT and E2E p90 significantly higher for none; beside it, how often chance alone gives
  as many wins. finish_first_told: the same rule for the router's estimate told of those
  releases against not told, and the estimate's error both ways. finish_first_real: on real
  vLLM engines (the release-first plugin), the real hit-rate change has the simulated one's sign
  for every router; on the real engines the same helps rule (finish_first_real_seeds: the
  confirmatory run on ten more seeds; finish_first_real_replicates: those seeds three times
  over, paired on seed and replicate, with the per-pair spread of the TTFT p90 change).
- process_startup: none (imports and a real fleet's start with and without compiled modules;
  docs/pipeline_timing.md).
- estimate_view_gap: none (the estimated cache view against the exact one on the tiers study's
  traces: whether its errors move predicted_ttft, and each view's error in expected HBM hits).
- queued_prefix_loss: none (its pre-registered reading per cell: whether the decisions whose
  request loses its prefix while queued are wrong, docs/kv_tiers/study_followups.md).
- refresh_on_arrival: the pre-registered rule of docs/kv_tiers/study_followups.md ("Refreshing
  a waiting request's prefix"): TTFT p90 significantly lower for some (cell, host, router), TTFT
  and E2E p90 significantly higher for none. refresh_on_arrival_real: on real vLLM engines (the
  refresh plugin), valid only if the refresh runs' engines and no others announce the plugin;
  no harm (no router's TTFT or E2E p90 significantly higher, no request errors with it on); the
  simulator's prediction, no change, holds if no real TTFT p90, E2E p90 or hit-rate change is
  significant (refresh_on_arrival_real_seeds: the confirmatory run, predicted_ttft on six more
  seeds, by the same rows).
- tiers_opening_near_tie_ttft: none (whether balancing session openings among near-ties closes
  predicted_ttft's losses to sticky_least_loaded without a loss elsewhere; issue 29's goal 2,
  docs/kv_tiers/study_followups.md, TraceLab section 10).
"""

from agentic_kvc.analysis.bench_summary.render import (
    render_markdown,
    summarize_benchmarks,
    summarize_file,
)

__all__ = ["render_markdown", "summarize_benchmarks", "summarize_file"]
