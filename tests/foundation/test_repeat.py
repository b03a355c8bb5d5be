"""`repeat`: identical runs as distinct runs, without moving any existing run_id."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentic_kvc.analysis.load import twin_key, variant_of
from agentic_kvc.config import ConfigError, load_config, run_id_of

# A config and its run_id as computed before the `repeat` field existed (commit cb62e64): a
# field added later must leave it alone, or every stored run would be orphaned.
FROZEN_CONFIG: dict[str, Any] = {
    "workload": {"generator": {"preset": "agentic-coding", "sessions": 3}},
    "fleet": {"instances": 3},
}
FROZEN_RUN_ID = "bc52945d88b4"


def test_existing_run_ids_do_not_move() -> None:
    assert load_config(FROZEN_CONFIG).run_id() == FROZEN_RUN_ID
    assert load_config(FROZEN_CONFIG, ["repeat=0"]).run_id() == FROZEN_RUN_ID


def test_repeat_zero_is_not_in_the_canonical_form(base_config: dict[str, Any]) -> None:
    cfg = load_config(base_config)
    assert cfg.repeat == 0 and "repeat" not in cfg.canonical()
    # The canonical form is every field but a zero repeat, a zero KV retention TTL, no host
    # neighbours, pause-aware placement off, finished sessions not first, no KV tiers, no
    # session jitter and token-id replay (all added later, so earlier run ids stay): nothing
    # else.
    dumped = cfg.model_dump(mode="json")
    assert dumped.pop("repeat") == 0 and dumped["sim"].pop("kv_retention_ttl_s") == 0
    assert dumped["workload"].pop("session_jitter_s") == 0
    assert dumped["sim"].pop("host_neighbour_threads") == 0
    assert dumped["sim"].pop("pause_aware") is False  # (and its two knobs, with it)
    dumped["sim"].pop("pause_keep_max_s")
    dumped["sim"].pop("pause_demote")
    assert dumped["sim"].pop("finish_first") is False
    assert dumped["sim"].pop("refresh_on_arrival") is False
    assert dumped["sim"].pop("router_sees_release") is True  # (told: only false enters)
    assert dumped["replay"].pop("api") == "completions"
    assert dumped["fleet"].pop("kv_tiers")["host_gib"] == 0
    assert dumped == cfg.canonical()


def test_kv_tiers_enter_the_run_id_only_when_on(base_config: dict[str, Any]) -> None:
    off = load_config(base_config)
    on = load_config(base_config, ["fleet.kv_tiers.host_gib=64"])
    assert "kv_tiers" in on.canonical()["fleet"] and on.run_id() != off.run_id()
    assert load_config(base_config, ["fleet.kv_tiers.write_through=true"]).run_id() == off.run_id()


def test_repeats_are_distinct_runs_of_one_config(base_config: dict[str, Any]) -> None:
    ids = [load_config(base_config, [f"repeat={k}"]).run_id() for k in range(4)]
    assert len(set(ids)) == 4 and ids[0] == load_config(base_config).run_id()
    one = load_config(base_config, ["repeat=1"])
    canonical = one.canonical()
    assert canonical["repeat"] == 1
    # Nothing but the repeat index differs.
    rest = {k: v for k, v in canonical.items() if k != "repeat"}
    assert rest == load_config(base_config).canonical()
    # A run's config.json reloads to the same run.
    assert load_config(copy.deepcopy(canonical)).run_id() == one.run_id() == run_id_of(canonical)


def test_negative_repeat_is_refused(base_config: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="repeat"):
        load_config(base_config, ["repeat=-1"])


def test_repeats_share_their_twin_and_variant(base_config: dict[str, Any]) -> None:
    real = [load_config(base_config, ["backend=vllm", f"repeat={k}"]).canonical() for k in (0, 2)]
    sim = load_config(base_config).canonical()
    assert twin_key(real[0]) == twin_key(real[1]) == twin_key(sim)
    other = load_config(base_config, ["seed=1"]).canonical()
    assert twin_key(other) != twin_key(sim)
    labels = {"repeat": 2, "policy.name": "unified", "fleet.instances": 2}
    assert variant_of("unified", labels) == "unified fleet.instances=2"


def test_backends_do_not_import_runs() -> None:
    """The backend contract module ends the runs <-> backends import circle."""
    code = (
        "import sys, agentic_kvc.sim.run_backend, agentic_kvc.serve.run_backend;"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('agentic_kvc.'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", "import json;" + code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parent,
    )
    loaded = json.loads(out.stdout)
    assert "agentic_kvc.sim.run_backend" in loaded and "agentic_kvc.serve.run_backend" in loaded
    assert "agentic_kvc.runs" not in loaded


def test_runs_finds_backends_by_name() -> None:
    from agentic_kvc.run_backend import backend_for
    from agentic_kvc.sim.run_backend import run_sim

    assert backend_for("sim") is run_sim
    with pytest.raises(ValueError, match="field 'backend'"):
        backend_for("nope")
