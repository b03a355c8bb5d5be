"""How well does the real engine predict itself at another hour? A baseline for the envelope.

`benchmarks/sim_vs_vllm.py` judges the simulator against the real repeats of one session: inside
their min..max, and within 15% of their mean on 1 instance. A model with no error at all would
still be judged against one hour's neighbours. This script takes several sessions' outputs of
that benchmark (same workload seed, real runs at different hours) and applies the same rule to
the real engine itself: session A's mean of its repeats, as if it were the prediction, against
session B's envelope, for every ordered pair (A, B) of sessions with the same seed. Beside it,
each session's own simulator verdicts, so the two pass rates can be read together, and per seed
and fleet size whether any one value could pass every session's envelope at all (a simulator
given the same inputs predicts one value).

    .venv/bin/python benchmarks/sim_vs_vllm_sessions.py A.json B.json ... --out OUT.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from itertools import permutations
from pathlib import Path
from typing import Any

from agentic_kvc.analysis.envelope import METRIC_NAMES, common_envelope, envelope


def load_session(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    if doc.get("benchmark") != "sim_vs_vllm":
        raise ValueError(f"{path}: not an output of benchmarks/sim_vs_vllm.py")
    return {
        "file": str(path),
        "seed": doc["config"]["seed"],
        "started_at": doc["started_at"],
        "cases": {c["instances"]: c for c in doc["cases"]},
    }


def cross_session(sessions: list[dict[str, Any]]) -> dict[str, Any]:
    """Per ordered pair of same-seed sessions and fleet size: A's real mean in B's envelope."""
    pairs = []
    for a, b in permutations(sessions, 2):
        if a["seed"] != b["seed"]:
            continue
        for n, case_b in b["cases"].items():
            case_a = a["cases"].get(n)
            if case_a is None:
                continue
            predicted = {
                m: statistics.fmean(r[m] for r in case_a["vllm_runs"]) for m in METRIC_NAMES
            }
            verdict = envelope(predicted, case_b["vllm_runs"], case_b["mean_tolerance"])
            pairs.append(
                {
                    "seed": a["seed"],
                    "instances": n,
                    "predictor": a["file"],
                    "judged_by": b["file"],
                    "metrics": {
                        m: {
                            "error": v["sim_rel_error"],
                            "inside_range": v["inside_range"],
                            "pass": v["pass"],
                        }
                        for m, v in verdict.items()
                    },
                }
            )
    # Per seed and fleet size seen in several sessions: could one prediction pass them all?
    common = []
    for seed in sorted({s["seed"] for s in sessions}):
        group = [s for s in sessions if s["seed"] == seed]
        for n in sorted({n for s in group for n in s["cases"]}):
            cases = [s["cases"][n] for s in group if n in s["cases"]]
            if len(cases) < 2:
                continue
            both = common_envelope([(c["vllm_runs"], c["mean_tolerance"]) for c in cases])
            common.append({"seed": seed, "instances": n, "sessions": len(cases), "metrics": both})
    return {
        "pairs": pairs,
        "common_envelope": common,
        "real_passes": sum(v["pass"] for p in pairs for v in p["metrics"].values()),
        "real_inside": sum(v["inside_range"] for p in pairs for v in p["metrics"].values()),
        "real_checks": sum(len(p["metrics"]) for p in pairs),
        "sim": [
            {
                "file": s["file"],
                "seed": s["seed"],
                "passes": sum(
                    m["pass"] for c in s["cases"].values() for m in c["metrics"].values()
                ),
                "inside": sum(
                    m["inside_range"] for c in s["cases"].values() for m in c["metrics"].values()
                ),
                "checks": sum(len(c["metrics"]) for c in s["cases"].values()),
            }
            for s in sessions
        ],
    }


def _label(file: str) -> str:
    path = Path(file)
    return f"{path.parent.name}/{path.name}"


def table(result: dict[str, Any]) -> str:
    lines = [
        "| seed | instances | predictor (real mean of) | judged by | "
        + " | ".join(m.removesuffix("_s").replace("_", " ") for m in METRIC_NAMES)
        + " |",
        "|---|---|---|---|" + "---|" * len(METRIC_NAMES),
    ]
    for p in result["pairs"]:
        cells = []
        for m in METRIC_NAMES:
            v = p["metrics"][m]
            mark = "yes" if v["pass"] else ("range" if v["inside_range"] else "no")
            cells.append(f"{v['error']:+.0%} {mark}")
        lines.append(
            f"| {p['seed']} | {p['instances']} | {_label(p['predictor'])} | "
            f"{_label(p['judged_by'])} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sessions", type=Path, nargs="+", help="outputs of benchmarks/sim_vs_vllm.py")
    ap.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    args = ap.parse_args()
    result = cross_session([load_session(p) for p in args.sessions])
    if not result["pairs"]:
        ap.error("no two sessions share a workload seed: nothing to compare")
    result["table_md"] = table(result)
    print(result["table_md"])
    print(
        f"real engine at another hour: {result['real_passes']}/{result['real_checks']} in the "
        f"envelope, {result['real_inside']}/{result['real_checks']} inside the range"
    )
    for c in result["common_envelope"]:
        none = [m for m, v in c["metrics"].items() if not v["feasible"]]
        print(
            f"seed {c['seed']}, {c['instances']} instance(s), {c['sessions']} sessions: no one "
            f"value passes them all on {len(none)} of {len(c['metrics'])} metrics"
            + (f" ({', '.join(none)})" if none else "")
        )
    for s in result["sim"]:
        print(
            f"simulator in {s['file']}: {s['passes']}/{s['checks']} in the envelope, "
            f"{s['inside']} inside the range"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
