import sys, numpy as np
from pathlib import Path
sys.path.insert(0, "/work/main/benchmarks")
from sim_vs_vllm_offline import runs_in
R = Path("/work/main/results")
POOL = [Path("/tmp/akvc_h5/calibration/runs"), R/"sim_vs_vllm_interleaved/calibration/runs", R/"sim_vs_vllm_interleaved_s13/calibration/runs"]
runs = [r for f in POOL for r in runs_in(f)]
for n in (1, 2):
    rs = [r for r in runs if r.instances == n]
    X = np.log(np.array([[r.real[k] for k in sorted(r.real)] for r in rs]))
    print(n, len(rs), "noise floor (mean sq log dev from geometric mean):", float(((X - X.mean(0))**2).mean()), "per metric sd", np.round(X.std(0), 3), sorted(rs[0].real))
