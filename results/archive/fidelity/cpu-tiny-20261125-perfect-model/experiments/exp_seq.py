"""Sweep a per-decode-sequence step cost (frontend per-token work) under the serving fit."""
import sys, json, math, time
from dataclasses import replace
from pathlib import Path
import numpy as np
sys.path.insert(0, "/work/main/benchmarks")
from sim_vs_vllm_offline import judge, runs_in
from agentic_kvc.sim.profiles import load_cpu_profile
from agentic_kvc.sim.serving_fit import fit_serving, apply_fit, fit_background, with_background, ServingRun
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
print(len(pool), len(nb), {k: len(v) for k, v in checks.items()}, flush=True)
base0 = load_cpu_profile(serving_fit=False)
out = {}
for x in [float(a) for a in sys.argv[1:]]:
    t = time.time()
    base = replace(base0, cost=replace(base0.cost, per_decode_seq_s=x))
    fit = fit_serving(base, pool, 2)
    scale = fit["prefill_scale"]; cont = fit["contended_slowdown"]; cont = (cont["prefill"], cont["step"])
    prof = lambda n: apply_fit(base, scale, cont if n >= 2 else None)
    bg = fit_background(prof, nb, 2, "delay")
    profbg = lambda n: with_background(prof(n), "delay", bg["contended" if n >= 2 else "spare"])
    res = {}
    for name, runs in checks.items():
        j = judge(profbg, runs, 2)
        res[name] = {"inside": j["inside_range"], "env": j["envelope"],
                     "err": {n: {m: v["sim"] / v["real_mean"] - 1 for m, v in c.items()} for n, c in j["cases"].items()}}
    ins = sum(v["inside"] for v in res.values()); env = sum(v["env"] for v in res.values())
    ab = {n: float(np.mean([abs(math.log(1 + e)) for v in res.values() for e in v["err"][n].values()])) for n in ("1", "2")}
    out[x] = {"scale": scale, "contended": cont, "loss": fit["loss"], "contended_loss": fit.get("contended_loss"),
              "bg": (bg["spare"], bg["contended"], bg["spare_loss"], bg["contended_loss"]), "inside": ins, "env": env, "abs_log": ab, "sessions": res}
    print(f"x={x*1e3:.2f}ms scale={scale} cont={cont} loss={fit['loss']:.4f} closs={fit.get('contended_loss'):.4f} bg={bg['spare']},{bg['contended']} bgloss={bg['spare_loss']:.4f},{bg['contended_loss']:.4f} inside={ins}/88 env={env}/88 abslog={ab} ({time.time()-t:.0f}s)", flush=True)
    print("   ", {k: (v["inside"], v["env"]) for k, v in res.items()}, flush=True)
json.dump(out, open(f"/tmp/akvc/exp_seq_{'_'.join(sys.argv[1:])}.json", "w"), indent=1)
