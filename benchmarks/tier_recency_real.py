"""Which end of a prompt a real vLLM host tier evicts first: loaded against never loaded.

The simulator's store-on-eviction tiers model vLLM 0.32's SimpleCPUOffloadConnector in lazy mode
(cache/tier_store.py, `simple_lru`), read from its code: blocks offloaded as HBM evicts them
join the host pool tail first (so a prompt's head is evicted last), blocks the pool holds already
are skipped, and a load's host blocks are freed in position order when it is done, so a
*loaded* prompt's head is evicted first. This checks that reading on a real engine.

One tiny-model CPU engine (129 KV blocks of 32 tokens), a host tier of about four prompts
(`--host-mib`, 13 MiB; lazy offload: `write_through` off), KV events read by the proxy's exact
view. Two 3,000-token prompts A and B are pushed out of HBM into the host tier; A alone is sent
again (loaded from the host tier); then fresh 1,000-token prompts flood the tier. After each
flood prompt the positions of A's and B's blocks still in the host tier are read from the view.
The reading predicts: B keeps a prefix (its tail went first), A keeps a suffix (its head went
first).
Verdict per prompt from the first flood step at which it lost blocks but kept some.

    flock /tmp/akvc_vllm.lock .venv/bin/python benchmarks/tier_recency_real.py \
        --out results/bench/tier_recency_real.json
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from agentic_kvc.config import FleetConfig, KVTiersConfig
from agentic_kvc.io import atomic_write_json
from agentic_kvc.processor import processor_label
from agentic_kvc.proxy.cache_view import make_hasher
from agentic_kvc.proxy.server import ProxyThread
from agentic_kvc.proxy.settings import ProxySettings
from agentic_kvc.runs import git_info, hardware_info, package_versions, timing_conditions
from agentic_kvc.serve.device import vllm_distribution
from agentic_kvc.serve.kv_transfer_flags import kv_launch
from agentic_kvc.serve.launcher import VllmFleet

BLOCK = 32
HBM_TOKENS = 129 * BLOCK
PROMPT = 3000
FLOOD = 1000  # flood prompts: 31 blocks each, so a prompt's blocks leave over several steps
MIB = 1 << 20
TIMEOUT_S = 60.0
# One client for every completion, made before any is in flight: `httpx.post` builds a client
# (and its SSL context) per call, and on the saturated 2-core machine, in the process that also
# runs the proxy's thread, that once took 9.4 s while another request decoded (0.04-0.05 s
# idle), so a "concurrent" request reached the engine only after the first had finished
# (docs/kv_tiers_real.md section 8). httpx.Client is safe to share between threads.
HTTP = httpx.Client(timeout=300)


def complete(
    url: str, model: str, prompt: list[int], max_tokens: int = 4, ignore_eos: bool = False
) -> int:
    """One greedy completion of `max_tokens` tokens (exactly that many with `ignore_eos`); the
    engine's cached prompt tokens."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    if ignore_eos:
        body["ignore_eos"] = True
    r = HTTP.post(url + "/v1/completions", json=body)
    r.raise_for_status()
    details = r.json()["usage"].get("prompt_tokens_details") or {}
    return int(details.get("cached_tokens") or 0)


def lazy_tier_engine(model: Path, host_mib: float, **fleet: Any) -> FleetConfig:
    """One tiny-model engine with HBM_TOKENS of HBM and a lazy host tier of `host_mib` MiB (the
    real tier benchmarks' engine); `fleet` sets other FleetConfig fields."""
    tiers = KVTiersConfig(host_gib=host_mib * MIB / (1 << 30), write_through=False)
    return FleetConfig(
        instances=1,
        model=str(model),
        block_size=BLOCK,
        max_num_seqs=8,
        kv_cache_tokens=HBM_TOKENS,
        kv_tiers=tiers,
        **fleet,
    )


def engine_facts(host_mib: float, **more: Any) -> dict[str, Any]:
    """The `engine` entry of the real tier benchmarks' files: the `lazy_tier_engine` they ran
    (`more`: what a benchmark changed or adds)."""
    return {
        "block_size": BLOCK,
        "kv_cache_tokens": HBM_TOKENS,
        "host_mib": host_mib,
        "lazy_offload": True,
        **more,
    }


def held(proxy: ProxyThread, keys: list[int], tier: str) -> list[int]:
    """Positions of `keys` (a prompt's router keys) that the exact view holds in `tier` on
    instance 0 (dict reads: safe from this thread)."""
    where = proxy.app.state.cache.index.tiers[tier]
    return [i for i, k in enumerate(keys) if 0 in where.holders(k)]


def settle(proxy: ProxyThread, quiet_s: float = 0.5) -> None:
    """Wait until the view has applied no KV event for `quiet_s` (the last step's events have
    landed), at most TIMEOUT_S."""
    index = proxy.app.state.cache.index
    deadline = time.monotonic() + TIMEOUT_S
    seen, since = index.events, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if index.events != seen:
            seen, since = index.events, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
    raise SystemExit("KV events never settled")


def await_subscription(proxy: ProxyThread, url: str, model: str, hasher: Any) -> None:
    """Events sent before the view subscribed are lost: send probes until the view shows one."""
    for attempt in range(200):
        probe = random.Random(90_000 + attempt).choices(range(100, 8000), k=2 * BLOCK + 1)
        complete(url, model, probe)
        pk = list(hasher.hash(None, probe))
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.0 and not held(proxy, pk, "hbm"):
            time.sleep(0.02)
        if held(proxy, pk, "hbm"):
            return
    raise SystemExit("no KV events reached the view")


@contextmanager
def engine_with_exact_view(
    fleet_cfg: FleetConfig, logs: Path, device: str = "cpu", env: dict[str, str] | None = None
) -> Iterator[tuple[ProxyThread, str]]:
    """One engine (`fleet_cfg`, logs in `logs`, `env` added to its environment) publishing KV
    events, and a proxy whose exact view has subscribed to them: (proxy, model name)."""
    kv = kv_launch(1, None, kv_events=True)
    with VllmFleet.from_config(
        fleet_cfg,
        logs,
        device=device,
        startup_timeout_s=400,
        per_instance_args=kv.args,
        per_instance_env=[{**e, **(env or {})} for e in kv.env],
    ) as fleet:
        url, model = fleet.urls[0], fleet.model_name
        settings = ProxySettings(
            engines=fleet.urls,
            port=0,
            policy="round_robin",
            cache_view="exact",
            kv_events=kv.events_endpoints,
            scrape_interval_s=0.5,
        )
        with ProxyThread(settings) as proxy:
            await_subscription(proxy, url, model, make_hasher(fleet_cfg.block_size))
            yield proxy, model


def facts_at_start() -> dict[str, Any]:
    """What a real run records of its machine, taken before its engine starts (the load and
    speed then), with the start time."""
    return {
        "t0": time.time(),
        "machine": hardware_info(),
        "timing": timing_conditions(),
        "dist": vllm_distribution(),
    }


def run_facts(benchmark: str, args: argparse.Namespace, start: dict[str, Any]) -> dict[str, Any]:
    """A real run's header: its command, times, processor, vLLM, machine, packages, git."""
    dist = start["dist"]
    return {
        "benchmark": benchmark,
        "command": f"benchmarks/{benchmark}.py "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start["t0"])),
        "seconds": round(time.time() - start["t0"], 1),
        "processor": processor_label(start["machine"]["processor"]),
        "vllm": dist[1] if dist else None,
        "vllm_distribution": dist[0] if dist else None,
        "machine": start["machine"],
        "timing": start["timing"],
        "packages": package_versions(),
        "git": git_info(),
    }


def wait_for(cond: Any, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting until {what}")
        time.sleep(0.05)


def shape(positions: list[int], n: int) -> str:
    """'prefix' (0..k-1), 'suffix' (k..n-1), 'all', 'none' or 'other'."""
    if not positions:
        return "none"
    if len(positions) == n:
        return "all"
    if positions == list(range(len(positions))):
        return "prefix"
    if positions == list(range(n - len(positions), n)):
        return "suffix"
    return "other"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", type=Path, default=Path("models/tiny-qwen2"))
    ap.add_argument("--host-mib", type=float, default=13.0, help="host tier size (MiB)")
    ap.add_argument("--flood", type=int, default=20, help="fresh prompts sent after the load")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not (args.model / "config.json").is_file():
        raise SystemExit(f"tier_recency_real: no model at {args.model} (run `make model`)")
    rng = random.Random(args.seed)

    def prompt(n: int = PROMPT) -> list[int]:
        return [rng.randrange(100, 8000) for _ in range(n)]

    fleet_cfg = lazy_tier_engine(args.model, args.host_mib)
    hasher = make_hasher(BLOCK)
    a, b = prompt(), prompt()
    keys_a = list(hasher.hash(None, a))
    keys_b = list(hasher.hash(None, b))
    n = len(keys_a)
    steps: list[dict[str, Any]] = []
    start = facts_at_start()
    logs = Path(tempfile.mkdtemp(prefix="akvc_tier_recency_"))
    with engine_with_exact_view(fleet_cfg, logs) as (proxy, model):

        def note(step: str, cached: int | None = None) -> None:
            settle(proxy)
            row = {
                "step": step,
                "cached_tokens": cached,
                "a_host": held(proxy, keys_a, "host"),
                "b_host": held(proxy, keys_b, "host"),
                "a_hbm": len(held(proxy, keys_a, "hbm")),
                "b_hbm": len(held(proxy, keys_b, "hbm")),
                "host_blocks": proxy.app.state.cache.blocks(0, "host"),
            }
            steps.append(row)
            print(
                f"{step:>10}: host A {shape(row['a_host'], n)} {len(row['a_host'])},"
                f" B {shape(row['b_host'], n)} {len(row['b_host'])}; tier holds"
                f" {row['host_blocks']} blocks"
            )

        note("A", complete(proxy.url, model, a))
        note("B", complete(proxy.url, model, b))
        for i in range(2):  # push A and B out of HBM into the host tier
            note(f"push{i}", complete(proxy.url, model, prompt()))
        wait_for(
            lambda: len(held(proxy, keys_a, "host")) == n and len(held(proxy, keys_b, "host")) == n,
            "A and B are whole in the host tier (a larger --host-mib?)",
        )
        cached = complete(proxy.url, model, a + prompt()[:64])  # A loaded from host
        note("reload A", cached)
        for i in range(args.flood):
            note(f"flood{i}", complete(proxy.url, model, prompt(FLOOD)))

    def first_partial(key: str) -> dict[str, Any] | None:
        after = steps[[s["step"] for s in steps].index("reload A") + 1 :]
        for s in after:
            if 0 < len(s[key]) < n:
                return {"step": s["step"], "kept": len(s[key]), "shape": shape(s[key], n)}
        return None

    verdict_a, verdict_b = first_partial("a_host"), first_partial("b_host")
    out = {
        **run_facts("tier_recency_real", args, start),
        "engine": engine_facts(args.host_mib),
        "prompt_blocks": n,
        "steps": steps,
        "loaded_prompt_A": verdict_a,
        "never_loaded_prompt_B": verdict_b,
        "reading_holds": bool(
            verdict_a
            and verdict_b
            and verdict_a["shape"] == "suffix"
            and verdict_b["shape"] == "prefix"
        ),
        "logs": str(logs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, out)
    print(json.dumps({k: out[k] for k in ("loaded_prompt_A", "never_loaded_prompt_B")}))
    print(f"reading holds: {out['reading_holds']}  ->  {args.out}")


if __name__ == "__main__":
    main()
