"""A policy with two parameter sets in one experiment (matrix key `policy`): named apart in
every table, the same runs as `policy.name` for the others, and the online cost model's
receipts summarised (issue 31 item 3: predicted_ttft profile-given and online-fitted in the
concurrency and real studies)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
import pytest
import yaml

from agentic_kvc.analysis.experiments import expand, policy_variants
from agentic_kvc.analysis.load import RunDir
from agentic_kvc.analysis.studies import real, run_study
from agentic_kvc.analysis.studies.base import Section, _labelled
from agentic_kvc.analysis.studies.common import online_fit_table, run_fit
from agentic_kvc.analysis.studies.concurrency import ONLINE, PROFILE
from agentic_kvc.config import load_config
from agentic_kvc.runs import execute
from tests.analysis.test_real_study_sources import real_study_data

BASE = {
    "backend": "sim",
    "workload": {"generator": {"preset": "agentic-coding", "sessions": 12}},
    "fleet": {"instances": 2, "model": "qwen3-coder-30b-a3b", "hardware": "h20"},
}
POLICIES = [
    {"name": "round_robin"},
    {"name": "unified"},
    {"name": "predicted_ttft", "params": {"cost_model": "profile"}},
    {"name": "predicted_ttft", "params": {"cost_model": "online", "online_prior": "generic"}},
]


def test_two_entries_of_one_policy_are_named_by_the_params_that_differ() -> None:
    names = policy_variants(
        [
            {"name": "round_robin"},
            {"name": "predicted_ttft", "params": {"hardware": "cpu-tiny", "cost_model": "profile"}},
            {
                "name": "predicted_ttft",
                "params": {"hardware": "cpu-tiny", "cost_model": "online", "online_prior": "x"},
            },
            {"name": "lmetric", "params": {"alpha": 2}},
        ]
    )
    assert names == [
        "round_robin",
        "predicted_ttft (cost_model=profile)",
        "predicted_ttft (cost_model=online, online_prior=x)",
        # One entry of its name: bare, whatever its params (a study's row keeps its name).
        "lmetric",
    ]
    assert len(set(policy_variants(POLICIES))) == len(POLICIES)


def test_policy_mappings_plan_the_same_runs_as_policy_names(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    by_name = expand(
        [{"name": "e", "base": "base.yaml", "matrix": {"policy.name": ["round_robin", "unified"]}}],
        tmp_path,
    )
    by_map = expand([{"name": "e", "base": "base.yaml", "matrix": {"policy": POLICIES}}], tmp_path)
    assert by_name.run_ids() == by_map.run_ids()[:2]
    assert len(set(by_map.run_ids())) == 4
    assert [r.variant for r in by_map.runs] == policy_variants(POLICIES)
    assert [r.policy for r in by_map.runs][2:] == ["predicted_ttft"] * 2
    # An experiment's own name for its runs wins over the derived one.
    named = expand(
        [{"name": "e", "base": "base.yaml", "variant": "v", "matrix": {"policy": POLICIES}}],
        tmp_path,
    )
    assert {r.variant for r in named.runs} == {"v"}
    # The `policy` label becomes no column of its own: `policy` stays the policy's name.
    planned = by_map.runs[3]
    run = RunDir(planned.run_id, tmp_path, "runs", {"config": {"policy": POLICIES[3]}})
    df = _labelled(pl.DataFrame({"ttft_s": [0.1]}), run, planned)
    assert df["policy"].to_list() == ["predicted_ttft"]
    assert df["variant"].to_list() == [f"predicted_ttft ({ONLINE.split('(', 1)[1]}"]


def _write_run(path: Path, fits: list[dict[str, Any] | None]) -> None:
    path.mkdir(parents=True)
    with (path / "requests.jsonl").open("w") as fh:
        for i, fit in enumerate(fits):
            scores = {"0": 0.1} | ({"cost_model": fit} if fit else {})
            fh.write(json.dumps({"request_id": f"r{i}", "scores": scores}) + "\n")


def _fit(obs: int, coef: list[float], ttft: float, decode: float) -> dict[str, Any]:
    return {
        "coef": coef,
        "coef_sd": [0.0] * 5,
        "observations": obs,
        "rel_error": {"ttft": ttft, "decode": decode},
    }


def test_online_fit_table_reads_prior_and_final_state_from_receipts(tmp_path: Path) -> None:
    prior = [0.02, 3e-5, 3e-9, 1.5e-4, 2e-8]
    # Receipts out of order: the state with the most observations is the final one.
    _write_run(
        tmp_path / "a",
        [
            _fit(4, [0.01, 4e-5, 3e-9, 1e-4, 2e-8], 0.5, 0.3),
            _fit(0, prior, 0.0, 0.0),
            None,
            _fit(10, [0.004, 8e-5, 6e-9, 2e-4, 1e-8], 0.2, 0.1),
        ],
    )
    _write_run(
        tmp_path / "b", [_fit(0, prior, 0, 0), _fit(20, [0.006, 6e-5, 4e-9, 3e-4, 0], 0.4, 0.3)]
    )
    _write_run(tmp_path / "c", [None])  # no receipts (the profile-given variant)
    first, last = run_fit(tmp_path / "a")  # type: ignore[misc]
    assert first["observations"] == 0 and last["observations"] == 10
    assert run_fit(tmp_path / "c") is None

    def run(name: str, cost_model: str) -> tuple[SimpleNamespace, SimpleNamespace]:
        cfg = {
            "backend": "sim",
            "policy": {"name": "predicted_ttft", "params": {"cost_model": cost_model}},
        }
        return SimpleNamespace(path=tmp_path / name, config=cfg), SimpleNamespace(variant="v")

    s = Section("x", "X", "?")
    data = SimpleNamespace(runs=[run("a", "online"), run("b", "online"), run("c", "profile")])
    assert online_fit_table(s, data, "test")  # type: ignore[arg-type]
    row = s.blocks[-1].splitlines()[-1].split(" | ")
    # variant, backend, runs, mean observations, then prior -> median of the final states.
    assert row[1:4] == ["sim", "2", "15"]
    assert row[4] == "20 -> 5"  # overhead in ms: median of 4 and 6
    assert row[5] == "30 -> 70"  # per token in us
    assert row[-2:] == ["30%", "20% |"]  # relative errors, mean over runs
    assert not online_fit_table(
        Section("x", "X", "?"), SimpleNamespace(runs=[run("c", "online")]), "t"
    )  # type: ignore[arg-type]
    # decode observations dropped as bursts (receipt `dropped`) show beside the count
    burst = _fit(30, [0.003, 4e-5, 3e-9, 1e-4, 2e-8], 0.4, 0.3) | {"dropped": {"decode_burst": 7}}
    _write_run(tmp_path / "d", [_fit(0, prior, 0, 0), burst])
    s = Section("x", "X", "?")
    assert online_fit_table(s, SimpleNamespace(runs=[run("d", "online"), run("b", "online")]), "t")  # type: ignore[arg-type]
    assert s.blocks[-1].splitlines()[-1].split(" | ")[3] == "25 (4 dropped)"  # means of 2 runs


@pytest.fixture(scope="module")
def concurrency_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("conc")
    (root / "base.yaml").write_text(yaml.safe_dump(BASE))
    exp = {
        "name": "concurrency",
        "study": "concurrency",
        "base": "base.yaml",
        "matrix": {"replay.max_inflight_sessions": [4], "policy": POLICIES, "seed": [0, 1, 2]},
    }
    plan = expand([exp], root)
    for planned in plan.runs:
        execute(load_config(root / planned.base, list(planned.overrides)), root / "results")
    (root / "results" / "work").mkdir(parents=True)
    (root / "results" / "work" / "plan.json").write_text(json.dumps(plan.to_json()))
    return root


def test_concurrency_study_keeps_the_two_predicted_ttft_variants_apart(
    concurrency_tree: Path,
) -> None:
    res = concurrency_tree / "results"
    s = run_study("concurrency", res, None, res / "work" / "plan.json", res / "t", res / "f")
    text = s.markdown()
    rows = [ln.split(" | ")[1] for ln in text.splitlines() if ln.startswith("| 4 |")]
    assert rows == ["round_robin", "unified", PROFILE, ONLINE]
    # The online variant is judged against the best other policy, and its fit is shown.
    assert "predicted_ttft fitting its cost model online: at 4 in flight it" in s.answer
    assert any(f.startswith("predicted_ttft online (generic prior) vs ") for f in s.findings)
    assert "The online-fitted cost model" in text and "the honest variant" in text
    fit_row = next(ln for ln in text.splitlines() if ln.startswith(f"| {ONLINE} | sim | 3 |"))
    assert int(fit_row.split(" | ")[3]) > 0  # the fit had observations


def test_real_study_pairs_predicted_ttft_rows_with_unified_too(tmp_path: Path) -> None:
    s = real.analyse(
        real_study_data(
            {"round_robin": 0.2, "unified": 0.1, real.PROFILE: 0.1, real.ONLINE: 0.3}, 0.05, 1
        ),
        tmp_path,
    )
    table = next(b for b in s.blocks if "| variant | repeats |" in b).splitlines()
    head = [c.strip() for c in table[2].split("|")]
    col = head.index("vs unified")
    cells = {ln.split("|")[1].strip(): ln.split("|")[col].strip() for ln in table[4:]}
    assert cells["round_robin"] == "-" and cells["unified"] == "-"
    assert cells[real.PROFILE] != "-" and cells[real.ONLINE].startswith("+")
    # ... and judged against unified by the repeats' spread: 3x slower is beyond it, equal
    # is within.
    assert f"{real.ONLINE} vs unified (+" in s.answer
    # The answer leads with the count of variants beyond the spread, then a bullet each.
    lead, bullets = s.answer.split("\n\n")
    assert lead.startswith("On these real engines ") and " of 3 variants differ" in lead
    assert all(line.startswith("- ") for line in bullets.splitlines())
    assert (
        s.answer.split(f"{real.ONLINE} vs unified (")[1]
        .split(")")[1]
        .startswith(" is beyond the repeats' spread")
    )
    assert (
        s.answer.split(f"{real.PROFILE} vs unified (")[1]
        .split(")")[1]
        .startswith(" is within the repeats' spread")
    )
    # Each predicted_ttft row is judged against round-robin like the others.
    assert any(f.startswith(f"real engines: {real.ONLINE} vs round_robin") for f in s.findings)
