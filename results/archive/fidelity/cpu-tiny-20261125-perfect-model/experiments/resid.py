import sys, json, math, numpy as np
from pathlib import Path
sys.path.insert(0, "/work/main/benchmarks")
from sim_vs_vllm_offline import runs_in
from agentic_kvc.sim.profiles import load_cpu_profile
R = Path("/work/main/results")
SESS = {"h5": R/"sim_vs_vllm_h5/runs", "s11": R/"sim_vs_vllm_interleaved/runs", "s13": R/"sim_vs_vllm_interleaved_s13/runs",
        "s14": R/"sim_vs_vllm_interleaved_s14/runs", "s15": R/"sim_vs_vllm_s15/runs", "s1503": R/"sim_vs_vllm/runs",
        "n0": R/"sim_vs_vllm_neighbours/n0/runs", "n1": R/"sim_vs_vllm_neighbours/n1/runs", "n2": R/"sim_vs_vllm_neighbours/n2/runs",
        "s17n0": R/"sim_vs_vllm_s17_n0/runs", "s17n1": R/"sim_vs_vllm_s17_n1/runs"}
profs = {n: load_cpu_profile(instances=n) for n in (1, 2)}
rows = []
for k, d in SESS.items():
    for r in runs_in(d):
        m = json.loads((r.run_dir/"manifest.json").read_text())
        w = (m["backend_info"].get("host_load") or {}); w = w.get("replay") or w.get("run") or {}
        sim = r.simulate(profs[r.instances])
        res = {q: math.log(r.real[q]/sim[q]) for q in r.real}
        cores = w.get("cores") or {}
        rows.append(dict(sess=k, n=r.instances, load1=(w.get("load1") or {}).get("mean"), steal=((w.get("shares") or {}).get("steal") or {}).get("mean"),
                         busy=(w.get("overall") or {}).get("busy"), others_cores=cores.get("others_cores"), own_cores=cores.get("own_cores"),
                         bg=r.background, started=m.get("started_at"), **res))
json.dump(rows, open("/tmp/akvc/resid.json", "w"))
for n in (1, 2):
    rs = [x for x in rows if x["n"] == n]
    for v in ("load1", "steal", "busy", "others_cores", "own_cores", "bg"):
        pts = [(x[v], np.mean([x[q] for q in ("ttft_p50_s","ttft_p90_s","e2e_p50_s","e2e_p90_s")])) for x in rs if x[v] is not None]
        if len(pts) > 5:
            a = np.array(pts); print(f"{n}i {v:13s} n={len(a):3d} r={np.corrcoef(a[:,0],a[:,1])[0,1]:+.2f} range {a[:,0].min():.2f}..{a[:,0].max():.2f}")
    print(f"{n}i residual mean {np.mean([np.mean([x[q] for q in ('ttft_p50_s','ttft_p90_s','e2e_p50_s','e2e_p90_s')]) for x in rs]):+.3f}, by session:",
          {k: round(float(np.mean([np.mean([x[q] for q in ('ttft_p50_s','ttft_p90_s','e2e_p50_s','e2e_p90_s')]) for x in rs if x['sess']==k])),2) for k in SESS})
