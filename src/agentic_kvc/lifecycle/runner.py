"""The lifecycle grid on real vLLM: P and D with the logging NIXL connector, C x N x O x reps.

Protocol per C (prior context): seed both instances' prefix caches with a C-token prefix (a
colocated request of one token each; P holding it too means P prefills only the N new tokens,
the design's "N: tokens P must prefill and transfer"), then check D's cache through its
metrics (the prefix sent again must hit `(C - 1) // block * block` tokens). Per (N, O, rep):
the PD request (prefix + N fresh tokens) through P -> D with the proxy's request shapes
(`proxy.pd.prefill_body` / `decode_body`), then the same shape colocated on D (its own fresh
N tokens, so neither request hits the other's blocks). Around each PD request D's
`prompt_tokens_by_source` counters are read: local_cache_hit must grow by D's prefix hit, and
external_kv_transfer by what D pulled. The first `warmup` repetitions of each prompt shape
(C, N) are run and discarded (at its first O; O only changes the decode that follows).

The runner is the proxy here (t0, t1, tp, t9, t10 are its clock); engine points come from the
wrapper connector's log (`lifecycle.logging_nixl_connector`).
"""

from __future__ import annotations

import csv
import json
import os
import random
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from agentic_kvc.lifecycle import protocol
from agentic_kvc.lifecycle.grids import Grid
from agentic_kvc.lifecycle.logging_nixl_connector import LOG_ENV
from agentic_kvc.metrics.prometheus import parse_vllm_metrics
from agentic_kvc.proxy import pd
from agentic_kvc.speed_probe import speed_probe

MODULE_PATH = "agentic_kvc.lifecycle.logging_nixl_connector"
VOCAB = (100, 8000)  # token ids the tiny model's vocabulary (8192) holds, clear of specials
SUMMARY_FIELDS = [
    "C",
    "N",
    "O",
    "rep",
    "ttft_ms",
    "colo_ttft_ms",
    "ttft_overhead_vs_colo_ms",
    "p_prefill_ms",
    "transfer_ms",
    "transfer_total_ms",
    "d_decode_ms",
    "e2e_ms",
    "colo_e2e_ms",
    "bytes",
    "blocks",
    "ops",
    "layers",
    "bw_gbps",
    "nixl_xfer_ms",
    "d_local_hit_tokens",
    "residual_frac",
    "unobserved",
    "load1",
]


def tokens(seed: str, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(*VOCAB) for _ in range(n)]


def _by_source(url: str, client: httpx.Client) -> dict[str, float]:
    return parse_vllm_metrics(client.get(url + "/metrics").text).prompt_tokens_by_source


@dataclass(slots=True)
class Timing:
    t0: int
    t1: int | None = None
    tp: int | None = None
    t9: int | None = None
    t10: int | None = None
    output_tokens: int = 0
    usage: dict[str, Any] = field(default_factory=dict)


def _stream(client: httpx.Client, url: str, body: dict[str, Any], rid: str, t: Timing) -> None:
    """Stream a completion; first/last token times on the monotonic clock."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    with client.stream(
        "POST", url + "/v1/completions", json=body, headers={"x-request-id": rid}
    ) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"{url} answered HTTP {resp.status_code}: {resp.read()[:300]!r}")
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            now = time.monotonic_ns()
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                t.usage = chunk["usage"]
            if chunk.get("choices"):
                t.output_tokens += 1
                t.t9 = t.t9 or now
                t.t10 = now


def run_pd(client: httpx.Client, p_url: str, d_url: str, body: dict[str, Any], rid: str) -> Timing:
    t = Timing(time.monotonic_ns())
    p_body = pd.prefill_body(body)
    t.t1 = time.monotonic_ns()
    ans = client.post(p_url + "/v1/completions", json=p_body, headers={"x-request-id": rid + "-p"})
    ans.raise_for_status()
    t.tp = time.monotonic_ns()
    d_body = pd.decode_body(body, "nixl", ans.json().get("kv_transfer_params"))
    _stream(client, d_url, d_body, rid + "-d", t)
    return t


def run_colo(client: httpx.Client, url: str, body: dict[str, Any], rid: str) -> Timing:
    t = Timing(time.monotonic_ns())
    t.t1 = t.t0
    _stream(client, url, body, rid, t)
    return t


def read_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def seed_prefix(
    client: httpx.Client, urls: Sequence[str], model: str, prefix: list[int], block: int
) -> dict[str, Any]:
    """Both instances compute the prefix; D's metrics then show it cached (sent again)."""
    if not prefix:
        return {"C": 0, "verified": True, "expected_hit": 0, "hit": 0}
    body = {"model": model, "prompt": prefix, "max_tokens": 1, "temperature": 0}
    for url in urls:
        client.post(url + "/v1/completions", json=body).raise_for_status()
    d_url = urls[-1]
    before = _by_source(d_url, client).get("local_cache_hit", 0.0)
    client.post(d_url + "/v1/completions", json=body).raise_for_status()
    hit = _by_source(d_url, client).get("local_cache_hit", 0.0) - before
    expected = (len(prefix) - 1) // block * block
    return {"C": len(prefix), "verified": hit >= expected, "expected_hit": expected, "hit": hit}


def measure_cell(
    client: httpx.Client,
    urls: Sequence[str],
    model: str,
    prefix: list[int],
    n: int,
    o: int,
    rep: int,
    events_path: Path,
    layers: int | None,
    block: int,
) -> dict[str, Any]:
    p_url, d_url = urls
    c = len(prefix)
    tag = f"lc-C{c}-N{n}-O{o}-r{rep}-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    base = {"model": model, "max_tokens": o, "temperature": 0, "ignore_eos": True}
    pd_body = {**base, "prompt": prefix + tokens(tag + "pd", n)}
    colo_body = {**base, "prompt": prefix + tokens(tag + "colo", n)}
    src0 = _by_source(d_url, client)
    load1 = os.getloadavg()[0]
    t = run_pd(client, p_url, d_url, pd_body, tag)
    time.sleep(0.05)  # the last engine events reach the log file
    src1 = _by_source(d_url, client)
    colo = run_colo(client, d_url, colo_body, tag + "-colo")
    time.sleep(0.05)
    events = read_events(events_path)
    p_ev = events_for_engine(events, tag + "-p")
    d_ev = events_for_engine(events, tag + "-d")
    eng, detail = protocol.engine_points(p_ev, d_ev)
    ts = {"t0": t.t0, "t1": t.t1, "tp": t.tp, "t9": t.t9, "t10": t.t10, **eng}
    ts = {k: ts.get(k) for k in protocol.POINTS}
    bd = protocol.breakdown(ts)
    colo_ev = events_for_engine(events, tag + "-colo")
    colo_sched = next((e["t_ns"] for e in colo_ev if e["ev"] == "scheduled"), None)
    colo_ts = {"t0": colo.t0, "t_sched": colo_sched, "t9": colo.t9, "t10": colo.t10}
    colo_bd = {
        "ttft": protocol._ms(colo.t0, colo.t9),
        "e2e": protocol._ms(colo.t0, colo.t10),
        "queue_prefill_first_token": protocol._ms(colo.t0, colo.t9),
        "decode": protocol._ms(colo.t9, colo.t10),
        "dispatch_to_schedule": protocol._ms(colo.t0, colo_sched),
    }
    if bd["ttft"] is not None and colo_bd["ttft"] is not None:
        bd["ttft_overhead_vs_colo"] = bd["ttft"] - colo_bd["ttft"]
    detail["d_metrics_local_cache_hit"] = src1.get("local_cache_hit", 0) - src0.get(
        "local_cache_hit", 0
    )
    detail["d_metrics_external_kv_transfer"] = src1.get("external_kv_transfer", 0) - src0.get(
        "external_kv_transfer", 0
    )
    # D holds the prefix's whole blocks; its lookup never counts the prompt's last token.
    expected_hit = min(c // block * block, (c + n - 1) // block * block)
    detail["d_expected_hit_tokens"] = expected_hit
    detail["d_cache_verified"] = detail.get("d_local_hit_tokens") == expected_hit
    return {
        "config": {
            "prior_context": c,
            "current_new_tokens": n,
            "output_length": o,
            "total_input_length": c + n,
            "rep": rep,
            "request_id": tag,
            "block_size": block,
        },
        "timestamps_ns": ts,
        "breakdown_ms": bd,
        "transfer_detail": protocol.transfer_detail(detail, layers, bd),
        "colocated": {"timestamps_ns": colo_ts, "breakdown_ms": colo_bd},
        "output_tokens": {"pd": t.output_tokens, "colo": colo.output_tokens},
        "host": {"load1": load1},
        "clock": "time.monotonic_ns (CLOCK_MONOTONIC, one machine)",
    }


def events_for_engine(events: list[dict[str, Any]], tag: str) -> list[dict[str, Any]]:
    """A request's events; `tag` ends in -p / -d / -colo, so tags do not prefix one another."""
    out = []
    for e in events:
        req = str(e.get("req") or "")
        # vLLM's engine id is "cmpl-<x-request-id>-<index>[-<suffix>]"
        if f"-{tag}-" in req or req.endswith(f"-{tag}") or req == tag:
            out.append(e)
    return out


def summary_row(rec: dict[str, Any]) -> dict[str, Any]:
    cfg, bd, td = rec["config"], rec["breakdown_ms"], rec["transfer_detail"]
    colo = rec["colocated"]["breakdown_ms"]
    return {
        "C": cfg["prior_context"],
        "N": cfg["current_new_tokens"],
        "O": cfg["output_length"],
        "rep": cfg["rep"],
        "ttft_ms": bd.get("ttft"),
        "colo_ttft_ms": colo.get("ttft"),
        "ttft_overhead_vs_colo_ms": bd.get("ttft_overhead_vs_colo"),
        "p_prefill_ms": bd.get("p_prefill"),
        "transfer_ms": bd.get("transfer"),
        "transfer_total_ms": bd.get("transfer_total"),
        "d_decode_ms": bd.get("d_decode"),
        "e2e_ms": bd.get("e2e"),
        "colo_e2e_ms": colo.get("e2e"),
        "bytes": td.get("bytes"),
        "blocks": td.get("blocks"),
        "ops": td.get("ops"),
        "layers": td.get("layers"),
        "bw_gbps": td.get("effective_bw_gbps"),
        "nixl_xfer_ms": td.get("nixl_xfer_ms"),
        "d_local_hit_tokens": td.get("d_local_hit_tokens"),
        "residual_frac": bd.get("residual_frac"),
        "unobserved": ";".join(bd.get("unobserved") or []),
        "load1": rec["host"]["load1"],
    }


def write_summary(out_dir: Path) -> Path:
    rows = [
        summary_row(json.loads(p.read_text())) for p in sorted(out_dir.glob("C*_N*_O*_rep*.json"))
    ]
    rows.sort(key=lambda r: (r["C"], r["N"], r["O"], r["rep"]))
    path = out_dir / "summary.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=SUMMARY_FIELDS)
        w.writeheader()
        w.writerows(rows)
    return path


@contextmanager
def lifecycle_fleet(
    log_dir: Path, events_path: Path, block: int = 32, model: str = "tiny", device: str = "cpu"
) -> Iterator[Any]:
    """P (instance 0) and D (instance 1), kv_both, the logging connector, one core (or GPU)
    each."""
    from agentic_kvc.config import FleetConfig
    from agentic_kvc.serve.kv_transfer_flags import kv_launch, warm_nixl_pairs
    from agentic_kvc.serve.launcher import VllmFleet

    kv = kv_launch(2, "nixl")
    args = []
    for inst in kv.args:
        inst = list(inst)
        k = inst.index("--kv-transfer-config")
        cfg = json.loads(inst[k + 1])
        cfg["kv_connector_module_path"] = MODULE_PATH  # our NixlConnector subclass
        inst[k + 1] = json.dumps(cfg)
        args.append(inst)
    env = [{**e, LOG_ENV: str(events_path)} for e in kv.env]
    fleet_cfg = FleetConfig(instances=2, model=model, block_size=block, max_num_seqs=8)
    fleet = VllmFleet.from_config(
        fleet_cfg,
        log_dir,
        device=device,
        startup_timeout_s=400,
        per_instance_args=args,
        per_instance_env=env,
    )
    with fleet as f:
        # Only P -> D is measured: warm that pair's NIXL handshake, not D -> P as well.
        warm_nixl_pairs(f.urls, f.model_name, roles=[None, "kv_consumer"])
        yield f


def layers_from(events: list[dict[str, Any]]) -> int | None:
    return next((e.get("layers") for e in events if e["ev"] == "layout"), None)


def run_grid(grid: Grid, out_dir: Path, block: int = 32, log: Any = print) -> dict[str, Any]:
    """Start P and D, run every cell, write one JSON per kept repetition and summary.csv."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("C*_N*_O*_rep*.json"):
        old.unlink()
    events_path = out_dir / "engine_events.jsonl"
    events_path.unlink(missing_ok=True)
    t_start = time.monotonic()
    meta: dict[str, Any] = {"grid": asdict(grid), "seeding": [], "records": 0}
    # The machine's speed before the engines start and after they stop (speed_probe.py): a
    # shared VM's phases move several fold between days at the same load.
    meta["speed_start"] = speed_probe()
    with lifecycle_fleet(out_dir / "logs", events_path, block, grid.model, grid.device) as fleet:
        meta["startup_s"] = fleet.startup_s
        meta["fleet_ready_s"] = round(time.monotonic() - t_start, 2)
        urls, model = fleet.urls, fleet.model_name
        layers = layers_from(read_events(events_path))
        with httpx.Client(timeout=600) as client:
            for c in grid.cs:
                prefix = tokens(f"prefix-{grid.name}-{c}", c)
                seeded = seed_prefix(client, urls, model, prefix, block)
                meta["seeding"].append(seeded)
                if not seeded["verified"]:
                    raise RuntimeError(f"D's prefix cache does not hold the C={c} prefix: {seeded}")
                warmed: set[int] = set()
                for cc, n, o in grid.cells():
                    if cc != c:
                        continue
                    # Warm-up per prompt shape (C, N): O only changes the decode that follows.
                    warmup = 0 if n in warmed else grid.warmup
                    warmed.add(n)
                    for rep in range(warmup + grid.reps):
                        rec = measure_cell(
                            client, urls, model, prefix, n, o, rep, events_path, layers, block
                        )
                        if rep < warmup:
                            continue
                        r = rep - warmup
                        rec["config"]["rep"] = r
                        rec["seeding"] = seeded
                        path = out_dir / f"C{c}_N{n}_O{o}_rep{r}.json"
                        path.write_text(json.dumps(rec, indent=1))
                        meta["records"] += 1
                        bd = rec["breakdown_ms"]
                        log(
                            f"C={c} N={n} O={o} rep={r}: ttft {bd['ttft']:.1f} ms, "
                            f"colo {rec['colocated']['breakdown_ms']['ttft']:.1f} ms, "
                            f"transfer {bd.get('transfer')} ms, "
                            f"bytes {rec['transfer_detail'].get('bytes')}"
                        )
    meta["wall_s"] = round(time.monotonic() - t_start, 2)
    meta["speed_end"] = speed_probe()
    write_summary(out_dir)
    (out_dir / "run.json").write_text(json.dumps(meta, indent=1))
    return meta
