"""Real default vs EPD on vLLM CPU with the tiny BLIP-2 (`epd/tiny_vlm.py`), random weights.

Both setups get the same two cores: `default` is two ordinary instances (each encodes its own
images), requests alternating between them; `epd` is one encode instance E (core 0, role
ec_producer) and one prefill-decode instance PD (core 1, ec_consumer) behind the EPD proxy
(`epd/app.py`, sequential: E first), embeddings moving through one loopback `redis-server`
with our connector (`epd/vllm_ec_connector.py`). All four engines start once; runs of the two
modes are interleaved (order rotated per repeat) and each repeat uses new images (the same
images for both modes), so no image is ever encoded from a cache. Every prompt is sent at t=0
(the published benchmark's infinite request rate), streamed, timed like `vllm bench serve`
(`replay/sse.py`). Host load is sampled through every run and kept with the records.

    python -m agentic_kvc.epd.real --out results/epd_real --prompts 8 --repeats 3
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import statistics
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import httpx
import numpy as np

from agentic_kvc.config import FleetConfig
from agentic_kvc.epd.app import EPDApp
from agentic_kvc.epd.tiny_vlm import build_tiny_vlm
from agentic_kvc.epd.vllm_ec_connector import ec_transfer_args
from agentic_kvc.proxy.server import ServerThread
from agentic_kvc.replay.sse import StreamTiming
from agentic_kvc.serve.hostload import HostLoadSampler
from agentic_kvc.serve.launcher import VllmFleet, repo_root
from agentic_kvc.serve.services import RedisServer

MODES = ("default", "epd")
SERVED = "tiny-vlm"


@dataclass
class Setup:
    default_urls: list[str]
    epd_url: str
    fleet: VllmFleet
    proxy: EPDApp


def image_url(seed: int, width: int = 640, height: int = 480) -> str:
    """A PNG of random pixels as a data URL (distinct seeds: distinct images and hashes)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def chat_body(image: str, text: str, max_tokens: int) -> dict[str, Any]:
    content = [{"type": "image_url", "image_url": {"url": image}}, {"type": "text", "text": text}]
    return {
        "model": SERVED,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "ignore_eos": True,  # every request generates exactly max_tokens: equal work per mode
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


@contextmanager
def start(model_dir: Path, log_dir: Path, kv_tokens: int = 16384) -> Iterator[Setup]:
    """Redis, E + PD + two default instances, and the EPD proxy; all stopped on exit."""
    with ExitStack() as stack:
        redis = stack.enter_context(RedisServer(log_dir))
        fleet_cfg = FleetConfig(
            instances=4, model=str(model_dir), block_size=32, kv_cache_tokens=kv_tokens
        )
        # Cores i % 2: E and default-0 on core 0, PD and default-1 on core 1.
        per = [
            ec_transfer_args("ec_producer", redis.url),
            ec_transfer_args("ec_consumer", redis.url),
            [],
            [],
        ]
        extra = ["--load-format", "dummy", "--dtype", "bfloat16", "--max-model-len", "4096"]
        extra += ["--served-model-name", SERVED]
        fleet = VllmFleet.from_config(
            fleet_cfg, log_dir, device="cpu", extra_args=extra, per_instance_args=per
        )
        stack.enter_context(fleet)
        e, pd, d0, d1 = fleet.urls
        app = EPDApp([e], [pd])
        proxy = stack.enter_context(ServerThread(app))
        yield Setup([d0, d1], proxy.url, fleet, app)


async def _one(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> dict[str, Any]:
    t = StreamTiming(time.perf_counter())
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            return {"error": f"{r.status_code}: {(await r.aread())[:300]!r}"}
        async for line in r.aiter_lines():
            t.feed_line(line.encode(), time.perf_counter())
    if t.error or t.t_first is None or t.t_last is None:
        return {"error": t.error or "no tokens"}
    n = t.output_tokens
    return {
        "ttft_s": t.t_first - t.t_send,
        "e2e_s": t.t_last - t.t_send,
        "tpot_s": (t.t_last - t.t_first) / (n - 1) if n > 1 else None,
        "itl_s": t.itl,
        "output_tokens": n,
        "prompt_tokens": t.prompt_tokens,
    }


async def run_mode(setup: Setup, mode: str, images: list[str], max_tokens: int) -> list[dict]:
    text = "what is in this picture? answer in detail"
    async with httpx.AsyncClient(timeout=600) as client:
        jobs = []
        for i, img in enumerate(images):
            url = setup.epd_url if mode == "epd" else setup.default_urls[i % 2]
            jobs.append(_one(client, url, chat_body(img, text, max_tokens)))
        t0 = time.perf_counter()
        out = await asyncio.gather(*jobs)
        wall = time.perf_counter() - t0
    return [{**o, "index": i, "wall_s": wall} for i, o in enumerate(out)]


def summarize(records: list[dict]) -> list[dict]:
    """Per mode and repeat: medians and means of TTFT / TPOT / ITL, throughput."""
    rows = []
    keys = sorted({(r["mode"], r["repeat"]) for r in records})
    for mode, rep in keys:
        rs = [r for r in records if r["mode"] == mode and r["repeat"] == rep and "error" not in r]
        if not rs:
            continue
        itl = [x for r in rs for x in r["itl_s"]]
        wall = rs[0]["wall_s"]
        rows.append(
            {
                "mode": mode,
                "repeat": rep,
                "n": len(rs),
                "errors": sum(1 for r in records if r["mode"] == mode and r["repeat"] == rep)
                - len(rs),
                "median_ttft_ms": 1e3 * statistics.median(r["ttft_s"] for r in rs),
                "mean_ttft_ms": 1e3 * statistics.fmean(r["ttft_s"] for r in rs),
                "median_tpot_ms": 1e3 * statistics.median(r["tpot_s"] for r in rs),
                "median_itl_ms": 1e3 * statistics.median(itl) if itl else None,
                "p99_itl_ms": 1e3 * float(np.percentile(itl, 99)) if itl else None,
                "req_s": len(rs) / wall,
                "out_tok_s": sum(r["output_tokens"] for r in rs) / wall,
            }
        )
    return rows


def run(
    out: Path,
    prompts: int = 8,
    repeats: int = 3,
    max_tokens: int = 32,
    model_dir: Path | None = None,
) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    model_dir = build_tiny_vlm(model_dir or repo_root() / "models" / "tiny-vlm")
    records: list[dict] = []
    with HostLoadSampler() as load, start(model_dir, out / "logs") as setup:
        startup = {"startup_s": setup.fleet.startup_s}
        # One warm-up request per engine path (first requests pay one-off costs).
        warm = [image_url(10_000 + i) for i in range(2)]
        asyncio.run(run_mode(setup, "default", warm, 4))
        asyncio.run(run_mode(setup, "epd", warm[:1], 4))
        for rep in range(repeats):
            images = [image_url(1000 * rep + i) for i in range(prompts)]
            order = MODES if rep % 2 == 0 else MODES[::-1]
            for mode in order:
                name = f"r{rep}-{mode}"
                load.mark(name)
                got = asyncio.run(run_mode(setup, mode, images, max_tokens))
                load.close(name)
                records += [{"mode": mode, "repeat": rep, **r} for r in got]
        routed = setup.proxy.routed
    host = load.summary()
    with (out / "records.jsonl").open("w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    summary = {
        "prompts": prompts,
        "repeats": repeats,
        "max_tokens": max_tokens,
        "image_px": [640, 480],
        "epd_proxy_routed": routed,
        **startup,
        "rows": summarize(records),
        "host_load": host,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


@click.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--prompts", default=8, show_default=True, help="Prompts per run, all at t=0.")
@click.option("--repeats", default=3, show_default=True, help="Runs per mode, interleaved.")
@click.option("--max-tokens", default=32, show_default=True)
def main(out: Path, prompts: int, repeats: int, max_tokens: int) -> None:
    """Real default vs EPD on vLLM CPU (tiny BLIP-2, random weights); needs redis-server."""
    s = run(out, prompts, repeats, max_tokens)
    for row in s["rows"]:
        click.echo(
            json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()})
        )


if __name__ == "__main__":
    main()
