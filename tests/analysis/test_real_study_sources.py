"""Study 7 pairs real variants with round-robin by repeat; a variant read from the archive
next to this checkout's round-robin was not interleaved with it, so it is marked, not judged."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl

from agentic_kvc.analysis.studies import real


def real_study_data(
    variants: dict[str, float], noise: float, seed: int, archived: frozenset[str] = frozenset()
) -> SimpleNamespace:
    """Study 7's input, built by hand: 3 repeats of 40 requests per variant, TTFT about the
    given seconds with `noise` relative scatter; the `archived` variants' runs come from the
    archive."""
    rng = np.random.default_rng(seed)
    rows = []
    runs = []
    for variant, ttft in variants.items():
        for rep in range(3):
            run_id = f"{variant}{rep}"
            source = "archive" if variant in archived else "runs"
            runs.append((SimpleNamespace(run_id=run_id, source=source, manifest={}), None))
            for i in range(40):
                t = ttft * (1 + noise * rng.standard_normal())
                rows.append(
                    {
                        "backend": "vllm",
                        "variant": variant,
                        "run_id": run_id,
                        "replicate": str(rep),
                        "request_id": f"r{i}",
                        "ttft_s": t,
                        "tpot_s": 0.01,
                        "e2e_s": t + 0.5,
                        "error": "",
                        "input_tokens": 1000,
                        "cached_tokens": 0,
                        "output_tokens": 50,
                        "prefill_instance": 0,
                        "decode_instance": 0,
                        "instances": 2,
                    }
                )
    data = SimpleNamespace(requests=pl.DataFrame(rows), runs=runs)
    data.manifests = lambda: [(SimpleNamespace(run_id=r.run_id), r.manifest) for r, _ in runs]
    return data


RR, PD = "round_robin", "adaptive v2 (NIXL)"


def _data(archived: set[str]) -> SimpleNamespace:
    # round_robin ~100 ms, "adaptive v2 (NIXL)" ~300 ms: a clear difference, 3 repeats each.
    return real_study_data({RR: 0.1, PD: 0.3}, 0.1, 0, frozenset(archived))


def test_archived_variant_beside_fresh_baseline_is_not_judged(tmp_path: Path) -> None:
    fresh = real.analyse(_data(set()), tmp_path)
    assert "beyond the repeats' spread" in fresh.answer
    assert not any("not interleaved" in f for f in fresh.findings)
    mixed = real.analyse(_data({PD}), tmp_path)
    assert "not run interleaved" in mixed.answer and "beyond" not in mixed.answer
    (line,) = [f for f in mixed.findings if "adaptive v2" in f]
    assert line.endswith("not interleaved: not a finding")
    # Both from the archive (one campaign): paired as usual.
    both = real.analyse(_data({RR, PD}), tmp_path)
    assert "beyond the repeats' spread" in both.answer
