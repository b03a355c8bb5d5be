"""Leave one workload seed out: fit the serving stage on the 26 pooled replays plus every quiet
run of the other seeds' sessions, the background stage on every run with recorded neighbours of
the other seeds, judge the held-out seed's sessions. Against the package's profile."""
import sys, json, time
from pathlib import Path
import numpy as np
sys.path.insert(0, "/work/main/benchmarks")
from sim_vs_vllm_offline import judge, runs_in
from agentic_kvc.sim.profiles import load_cpu_profile
from agentic_kvc.sim.serving_fit import fit_serving, apply_fit, fit_background, with_background
R = Path("/work/main/results")
POOL = [Path("/tmp/akvc_h5/calibration/runs"), R/"sim_vs_vllm_interleaved/calibration/runs", R/"sim_vs_vllm_interleaved_s13/calibration/runs"]
# session -> (check dir, seed, quiet?, extra calibration dirs)
SESS = {"h5": (R/"sim_vs_vllm_h5/runs", 11, True), "s11": (R/"sim_vs_vllm_interleaved/runs", 11, True),
        "s1503": (R/"sim_vs_vllm/runs", 11, True), "s13": (R/"sim_vs_vllm_interleaved_s13/runs", 13, True),
        "s14": (R/"sim_vs_vllm_interleaved_s14/runs", 14, True), "s15": (R/"sim_vs_vllm_s15/runs", 15, True),
        "n0": (R/"sim_vs_vllm_neighbours/n0/runs", 16, True), "n1": (R/"sim_vs_vllm_neighbours/n1/runs", 16, False),
        "n2": (R/"sim_vs_vllm_neighbours/n2/runs", 16, False),
        "s17n0": (R/"sim_vs_vllm_s17_n0/runs", 17, True), "s17n1": (R/"sim_vs_vllm_s17_n1/runs", 17, False)}
EXTRA_CAL = [R/"sim_vs_vllm_interleaved_s14/calibration/runs"]  # seed-12 replays of the s14 sitting
NBCAL = {0: R/"sim_vs_vllm_neighbours/n0/calibration/runs", 1: R/"sim_vs_vllm_neighbours/n1/calibration/runs", 2: R/"sim_vs_vllm_neighbours/n2/calibration/runs"}
pool = [r for f in POOL + EXTRA_CAL for r in runs_in(f)] + runs_in(NBCAL[0])
nbcal = [r for f in NBCAL.values() for r in runs_in(f)]
checks = {k: runs_in(v[0]) for k, v in SESS.items()}
base = load_cpu_profile(serving_fit=False)
out = {}
for seed in [int(a) for a in sys.argv[1:]]:
    t = time.time()
    serving = pool + [r for k, (d, s, quiet) in SESS.items() if s != seed and quiet for r in checks[k]]
    f = fit_serving(base, serving, 2)
    scale = f["prefill_scale"]; c = f["contended_slowdown"]; cont = (c["prefill"], c["step"])
    prof = lambda n: apply_fit(base, scale, cont if n >= 2 else None)
    bgruns = nbcal + [r for k, (d, s, q) in SESS.items() if s != seed for r in checks[k] if r.background is not None]
    bg = fit_background(prof, bgruns, 2, "delay")
    pb = lambda n: with_background(prof(n), "delay", bg["contended" if n >= 2 else "spare"])
    res = {}
    for k, (d, s, q) in SESS.items():
        if s != seed: continue
        j = judge(pb, checks[k], 2); res[k] = j
        misses = [f"{n}i {m[:-2]} {v['sim_rel_error']:+.0%}" for n, cc in j["cases"].items() for m, v in cc.items() if not v["pass"]]
        print(f"seed {seed} held out, {k}: env {j['envelope']}/8 inside {j['inside_range']}/8 | {'; '.join(misses)}", flush=True)
    print(f"seed {seed}: scale {scale} contended {cont} bg {bg['spare']},{bg['contended']} ({len(serving)} serving runs, {len(bgruns)} bg runs) {time.time()-t:.0f}s", flush=True)
    out[seed] = {"scale": scale, "contended": cont, "bg": [bg["spare"], bg["contended"]],
                 "results": [{"fit": "loso", "session": k, **j} for k, j in res.items()]}
json.dump(out, open(f"/tmp/akvc/loso_{'_'.join(sys.argv[1:])}.json", "w"))
