"""Variant: the probes' prefill times minus the measured frontend path; the frontend as a
non-blocking per-request delay. Refit serving (pooled) + background; judge all sessions."""
import sys, json, copy, time
from dataclasses import replace
from pathlib import Path
import numpy as np
sys.path.insert(0, "/work/main/benchmarks")
from sim_vs_vllm_offline import judge, runs_in
from agentic_kvc.analysis.envelope import perfect_model_total
from agentic_kvc.calibrate.engine import fit, measurements_from_doc, Measurement
from agentic_kvc.sim.profiles import load_cpu_profile, CPU_TINY_FILE
from agentic_kvc.sim.serving_fit import fit_serving, apply_fit, fit_background, with_background
R = Path("/work/main/results")
POOL = [Path("/tmp/akvc_h5/calibration/runs"), R/"sim_vs_vllm_interleaved/calibration/runs", R/"sim_vs_vllm_interleaved_s13/calibration/runs"]
NB = [R/f"sim_vs_vllm_neighbours/n{i}/calibration/runs" for i in range(3)]
SESS = {"h5": R/"sim_vs_vllm_h5/runs", "s11": R/"sim_vs_vllm_interleaved/runs", "s13": R/"sim_vs_vllm_interleaved_s13/runs",
        "s14": R/"sim_vs_vllm_interleaved_s14/runs", "s15": R/"sim_vs_vllm_s15/runs", "s1503": R/"sim_vs_vllm/runs",
        "n0": R/"sim_vs_vllm_neighbours/n0/runs", "n1": R/"sim_vs_vllm_neighbours/n1/runs", "n2": R/"sim_vs_vllm_neighbours/n2/runs",
        "s17n0": R/"sim_vs_vllm_s17_n0/runs", "s17n1": R/"sim_vs_vllm_s17_n1/runs"}
pool = [r for f in POOL for r in runs_in(f)]
nb = [r for f in NB for r in runs_in(f)]
checks = {k: runs_in(v) for k, v in SESS.items()}
a, b = float(sys.argv[1]), float(sys.argv[2])  # frontend fixed s, per token s
doc = json.loads(CPU_TINY_FILE.read_text())
ms = measurements_from_doc(doc, "pkg")
ms2 = [replace(m, seconds=m.seconds - (a + b * m.prefill_chunks[0][0])) if m.kind == "prefill" else m for m in ms]
res = fit(ms2)
print("coefficients", {k: f"{v:.3g}" for k, v in res.cost.as_dict().items()}, "fit err", round(res.summary()["mean_abs_rel_error"], 3))
base0 = load_cpu_profile(serving_fit=False)
base = replace(base0, cost=res.cost, frontend_s=a, frontend_per_token_s=b)
t = time.time()
f = fit_serving(base, pool, 2)
scale = f["prefill_scale"]; c = f["contended_slowdown"]; cont = (c["prefill"], c["step"])
print("serving fit", scale, cont, "loss", round(f["loss"], 4), round(f["contended_loss"], 4), f"{time.time()-t:.0f}s", flush=True)
prof = lambda n: apply_fit(base, scale, cont if n >= 2 else None)
bg = fit_background(prof, nb, 2, "delay")
print("background", bg["spare"], bg["contended"], "loss", round(bg["spare_loss"], 4), round(bg["contended_loss"], 4), flush=True)
pb = lambda n: with_background(prof(n), "delay", bg["contended" if n >= 2 else "spare"])
tot = 0; out = {"results": []}
for name, runs in checks.items():
    j = judge(pb, runs, 2); tot += j["envelope"]
    out["results"].append({"fit": "variant", "session": name, **j})
    misses = [f"{n}i {m[:-2]} {v['sim_rel_error']:+.0%}" for n, cc in j["cases"].items() for m, v in cc.items() if not v["pass"]]
    print(f"{name}: inside {j['inside_range']}/8 env {j['envelope']}/8 {'; '.join(misses)}", flush=True)
print("total envelope", tot, "of 88")
json.dump(out, open(f"/tmp/akvc/front_{a}_{b}.json", "w"))
