"""Client TTFT vs vLLM's engine-side queue + prefill time, single requests, one real CPU instance."""
import asyncio, json, random, statistics, tempfile
from pathlib import Path
import httpx
from agentic_kvc.calibrate.engine import _stream, _prompt
from agentic_kvc.config import FleetConfig
from agentic_kvc.serve.device import pinned
from agentic_kvc.serve.launcher import VllmFleet
H = ("vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds", "vllm:time_to_first_token_seconds", "vllm:request_inference_time_seconds")
async def totals(client, url):
    text = (await client.get(url + "/metrics")).text
    out = {}
    for h in H:
        s = c = 0.0
        for line in text.splitlines():
            if line.startswith(h + "_sum"): s += float(line.rsplit(" ", 1)[1])
            elif line.startswith(h + "_count"): c += float(line.rsplit(" ", 1)[1])
        out[h] = (s, c)
    return out
async def main(url, model):
    rng = random.Random(7); rows = []
    async with httpx.AsyncClient(timeout=600.0) as client:
        for _ in range(3): await _stream(client, url, model, _prompt(rng, 512), 8)
        for length in (32, 256, 1024, 2048, 3968):
            for rep in range(5):
                b = await totals(client, url)
                st = await _stream(client, url, model, _prompt(rng, length), 1)
                a = await totals(client, url)
                d = {h.split(":")[1]: (a[h][0] - b[h][0]) * 1e3 for h in H}
                rows.append({"len": length, "client_ttft_ms": (st[1] - st[0]) * 1e3, **d})
            med = {k: statistics.median(r[k] for r in rows if r["len"] == length) for k in rows[-1] if k != "len"}
            print(length, {k: round(v, 2) for k, v in med.items()}, flush=True)
    return rows
with tempfile.TemporaryDirectory() as tmp:
    with VllmFleet.from_config(FleetConfig(instances=1, model="tiny", hardware="cpu-tiny", block_size=32), Path(tmp)) as fleet:
        with pinned(fleet.plan.frontend_cores):
            rows = asyncio.run(main(fleet.urls[0], fleet.model_name))
json.dump(rows, open("/tmp/akvc/prefill_split.json", "w"))
