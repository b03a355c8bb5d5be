"""Finished sessions first on real vLLM CPU engines, beside the simulator's prediction
(docs/kv_tiers/pause_aware.md, "On real vLLM engines"): benchmarks/engine_variant_real.py with
`--compare finish_first`, under the name the archived finish_first_real files' commands use.

    flock /tmp/akvc_vllm.lock .venv/bin/python benchmarks/finish_first_real.py \\
        --out results/bench/finish_first_real.json
"""

from __future__ import annotations

from engine_variant_real import main

if __name__ == "__main__":
    raise SystemExit(main("benchmarks/finish_first_real.py", "finish_first"))
