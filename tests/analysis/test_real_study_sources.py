"""Study 7 pairs real variants with round-robin by repeat; a variant read from the archive
next to this checkout's round-robin was not interleaved with it, so it is marked, not judged."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl

from agentic_kvc.analysis.studies import real


def _data(archived: set[str]) -> SimpleNamespace:
    rng = np.random.default_rng(0)
    rows = []
    runs = []
    # round_robin ~100 ms, "adaptive v2 (NIXL)" ~300 ms: a clear difference, 3 repeats each.
    for variant, ttft in (("round_robin", 0.1), ("adaptive v2 (NIXL)", 0.3)):
        for rep in range(3):
            run_id = f"{variant[:2]}{rep}"
            source = "archive" if run_id in archived else "runs"
            runs.append((SimpleNamespace(run_id=run_id, source=source, manifest={}), None))
            for i in range(40):
                t = ttft * (1 + 0.1 * rng.standard_normal())
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


def test_archived_variant_beside_fresh_baseline_is_not_judged(tmp_path: Path) -> None:
    fresh = real.analyse(_data(set()), tmp_path)
    assert "beyond the repeats' spread" in fresh.answer
    assert not any("not interleaved" in f for f in fresh.findings)
    mixed = real.analyse(_data({"ad0", "ad1", "ad2"}), tmp_path)
    assert "not run interleaved" in mixed.answer and "beyond" not in mixed.answer
    (line,) = [f for f in mixed.findings if "adaptive v2" in f]
    assert line.endswith("not interleaved: not a finding")
    # Both from the archive (one campaign): paired as usual.
    both = real.analyse(_data({"ro0", "ro1", "ro2", "ad0", "ad1", "ad2"}), tmp_path)
    assert "beyond the repeats' spread" in both.answer
