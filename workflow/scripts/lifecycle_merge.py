"""Merge per-C parts of a lifecycle grid (one pipeline job each) into one records folder.

`akvc lifecycle run --grid gpu --c C` writes C's records (C{C}_N*_O*_rep*.json), its
summary.csv and run.json into a part folder (workflow/rules/sweeps.smk); this copies every
part's records into --out and writes the summary, calibration and a run.json naming the parts
there, as one `akvc lifecycle run --grid gpu` would have.

    python workflow/scripts/lifecycle_merge.py results/lifecycle/gpu_parts/C0 ... \\
        --out results/lifecycle/gpu
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path


def merge(parts: list[Path], out: Path) -> dict:
    """Copy the parts' records into `out` (refusing a record two parts both hold), then write
    summary.csv, calibration.json and run.json there."""
    from agentic_kvc.analysis.studies.lifecycle import calibration, load_records
    from agentic_kvc.lifecycle.runner import write_summary

    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("C*_N*_O*_rep*.json"):
        old.unlink()
    seen: dict[str, Path] = {}
    runs = []
    for part in parts:
        records = sorted(part.glob("C*_N*_O*_rep*.json"))
        if not records:
            raise SystemExit(f"{part}: no lifecycle records (C*_N*_O*_rep*.json)")
        for rec in records:
            if rec.name in seen:
                raise SystemExit(f"{rec.name} is in both {seen[rec.name]} and {part}")
            seen[rec.name] = part
            shutil.copy2(rec, out / rec.name)
        meta = part / "run.json"
        runs.append({"part": str(part), **(json.loads(meta.read_text()) if meta.is_file() else {})})
    write_summary(out)
    cal = calibration(load_records(out), source=str(out))
    (out / "calibration.json").write_text(json.dumps(cal, indent=1) + "\n")
    doc = {"parts": runs, "records": len(seen)}
    (out / "run.json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("parts", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    doc = merge(a.parts, a.out)
    print(json.dumps({"out": str(a.out), "records": doc["records"], "parts": len(a.parts)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
