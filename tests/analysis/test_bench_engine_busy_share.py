"""benchmarks/engine_busy_share.py: shares computed from instance samples by hand."""

from __future__ import annotations

import json
from pathlib import Path

from agentic_kvc.bench_scripts import load_benchmark

bench = load_benchmark("engine_busy_share")


def _write(path: Path, samples: list[tuple[float, int, int | None, int]]) -> None:
    path.write_text(
        "".join(
            json.dumps(
                {
                    "t": t,
                    "instance": i,
                    "running": run,
                    "waiting": wait,
                    "kv_usage": 0.5,
                    "preemptions": 2.0 if i else None,
                }
            )
            + "\n"
            for t, i, run, wait in samples
        )
    )


def test_shares_over_sample_times_with_every_instance(tmp_path: Path) -> None:
    f = tmp_path / "instances.jsonl"
    _write(
        f,
        [
            (0.0, 0, 1, 0),
            (0.0, 1, 1, 2),  # both busy
            (0.5, 0, 0, 0),
            (0.5, 1, 3, 0),  # one busy
            (1.0, 0, None, 0),
            (1.0, 1, 0, 0),  # none (a null before the first scrape)
            (1.5, 0, 5, 1),  # instance 1 missing: not counted
        ],
    )
    got = bench.busy_share(f, 2)
    assert got is not None
    assert got["samples"] == 3
    assert got["all_busy"] == 1 / 3
    assert got["any_busy"] == 2 / 3
    assert got["running_per_instance"] == (1 + 1 + 0 + 3 + 0 + 0) / 6
    assert got["waiting_per_instance"] == 2 / 6
    assert got["preemptions_max"] == 2.0


def test_runs_of_other_fleets_are_skipped(tmp_path: Path) -> None:
    for name, instances in (("a", 2), ("b", 3)):
        d = tmp_path / "runs" / name
        d.mkdir(parents=True)
        cfg = {
            "backend": "sim",
            "fleet": {"model": "tiny", "instances": instances},
            "policy": {"name": "round_robin"},
        }
        (d / "config.json").write_text(json.dumps(cfg))
        _write(d / "instances.jsonl", [(0.0, i, 1, 0) for i in range(instances)])
    out = tmp_path / "busy.json"
    bench.main([str(tmp_path), "--out", str(out)])
    rows = json.loads(out.read_text())["results"]
    assert [Path(r["run"]).name for r in rows] == ["a"]
    assert json.loads(out.read_text())["command"].endswith(f"{tmp_path} --out {out}")
    assert rows[0]["all_busy"] == 1.0
