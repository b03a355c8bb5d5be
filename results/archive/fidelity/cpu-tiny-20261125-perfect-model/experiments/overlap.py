import sys, numpy as np
from pathlib import Path
sys.path.insert(0, "/work/main/benchmarks")
from sim_vs_vllm_offline import runs_in
R = Path("/work/main/results")
S = {"h5": R/"sim_vs_vllm_h5/runs", "s11": R/"sim_vs_vllm_interleaved/runs", "s1503": R/"sim_vs_vllm/runs"}
runs = {k: runs_in(v) for k, v in S.items()}
M = ["ttft_p50_s", "ttft_p90_s", "e2e_p50_s", "e2e_p90_s"]
ok = 0
for n in (1, 2):
    for m in M:
        rng = {k: (min(r.real[m] for r in rs if r.instances == n), max(r.real[m] for r in rs if r.instances == n), np.mean([r.real[m] for r in rs if r.instances == n])) for k, rs in runs.items()}
        lo = max(v[0] for v in rng.values()); hi = min(v[1] for v in rng.values())
        # 1i: also within 15% of each session's mean
        if n == 1:
            lo = max(lo, max(v[2] * 0.85 for v in rng.values())); hi = min(hi, min(v[2] * 1.15 for v in rng.values()))
        feasible = lo <= hi
        ok += feasible
        print(f"{n}i {m}: " + "  ".join(f"{k} {v[0]*1e3:.0f}..{v[1]*1e3:.0f} (mean {v[2]*1e3:.0f})" for k, v in rng.items()) + f"  -> one value passes all three: {'yes' if feasible else 'NO'}")
print(ok, "of 8 metrics have a value passing all three sessions")
