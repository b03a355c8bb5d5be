"""Client-side vs engine-side decode time per token, k concurrent streams, one real vLLM CPU instance."""
import asyncio, json, random, statistics, sys, tempfile, time
from pathlib import Path
import httpx
from agentic_kvc.calibrate.engine import _stream, _prompt, decode_time_totals
from agentic_kvc.config import FleetConfig
from agentic_kvc.serve.device import pinned
from agentic_kvc.serve.launcher import VllmFleet
N = 64
async def main(url, model):
    rng = random.Random(5)
    rows = []
    async with httpx.AsyncClient(timeout=600.0) as client:
        for _ in range(3):
            await _stream(client, url, model, _prompt(rng, 512), 8)
        for rep in range(3):
            for k in (1, 2, 4, 8, 16, 32):
                prompts = [_prompt(rng, 256) for _ in range(k)]
                await asyncio.gather(*(_stream(client, url, model, p, 1) for p in prompts))
                before = await decode_time_totals(client, url)
                res = await asyncio.gather(*(_stream(client, url, model, p, N) for p in prompts))
                after = await decode_time_totals(client, url)
                eng = (after[0] - before[0]) / (after[1] - before[1]) / (N - 1)
                cli = statistics.mean((s[-1] - s[1]) / (N - 1) for s in res)
                events = statistics.mean(len(s) - 1 for s in res)
                rows.append({"rep": rep, "k": k, "engine_ms": eng * 1e3, "client_ms": cli * 1e3, "events_per_stream": events})
                print(json.dumps(rows[-1]), flush=True)
    return rows
with tempfile.TemporaryDirectory() as tmp:
    with VllmFleet.from_config(FleetConfig(instances=1, model="tiny", hardware="cpu-tiny", block_size=32), Path(tmp)) as fleet:
        with pinned(fleet.plan.frontend_cores):
            rows = asyncio.run(main(fleet.urls[0], fleet.model_name))
json.dump(rows, open("/tmp/akvc/frontend.json", "w"))
