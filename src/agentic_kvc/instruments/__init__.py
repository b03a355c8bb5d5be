"""Research instruments over the simulator: counterfactual regret of routing decisions
(`regret`), the prefix-cache views' error against the engines' block pools (`cache_error`), and
several router replicas in front of one fleet (`routers`). Each works on any run directory's
config and any registered policy; `akvc regret|cache-error|routers --help` and
docs/instruments.md describe them."""
