"""The vLLM-facing Redis encoder-cache connector against a real redis-server, no engine: E's
worker saves, PD's scheduler sees the item and queues its load, PD's worker loads it exactly;
with Redis gone, PD falls back to encoding (lookup False) and a queued load fails clearly."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm.distributed.ec_transfer")

from vllm.config import ECTransferConfig  # noqa: E402
from vllm.distributed.ec_transfer.ec_connector.base import ECConnectorRole  # noqa: E402
from vllm.distributed.ec_transfer.ec_connector.factory import ECConnectorFactory  # noqa: E402

from agentic_kvc.epd.ec_transport import ECTransportError  # noqa: E402
from agentic_kvc.epd.vllm_ec_connector import RedisECTransfer, ec_transfer_args  # noqa: E402
from agentic_kvc.serve.services import RedisServer, redis_available  # noqa: E402

pytestmark = pytest.mark.skipif(redis_available() is None, reason="redis-server not installed")


def _connector(role: str, url: str, worker: bool) -> RedisECTransfer:
    import json

    cfg = json.loads(ec_transfer_args(role, url, prefix="t")[1])
    vcfg = SimpleNamespace(ec_transfer_config=ECTransferConfig(**cfg))
    # The class vLLM's factory resolves from the module path is ours.
    cls = ECConnectorFactory.get_connector_class(vcfg.ec_transfer_config)
    assert cls is RedisECTransfer
    role_ = ECConnectorRole.WORKER if worker else ECConnectorRole.SCHEDULER
    return cls(vcfg, role_)  # type: ignore[arg-type]


def _request(*hashes: str) -> SimpleNamespace:
    return SimpleNamespace(mm_features=[SimpleNamespace(identifier=h) for h in hashes])


def test_embedding_flows_e_to_pd_exactly_and_redis_loss_is_clear(tmp_path: Path) -> None:
    emb = torch.randn(1024, 256).to(torch.bfloat16)
    with RedisServer(tmp_path) as redis:
        e = _connector("ec_producer", redis.url, worker=True)
        pd_sched = _connector("ec_consumer", redis.url, worker=False)
        pd_worker = _connector("ec_consumer", redis.url, worker=True)
        assert not pd_sched.has_cache_item("img0")
        e.save_caches({"img0": emb}, "img0")
        pd_worker.save_caches({"img0": emb}, "nope")  # a consumer never stores
        assert pd_sched.has_cache_item("img0") and not pd_sched.has_cache_item("nope")
        assert 0 < e._redis.ttl("t:ec:img0") <= 600  # entries expire: nothing else frees them
        pd_sched.update_state_after_alloc(_request("img0"), 0)
        meta = pd_sched.build_connector_meta(None)  # type: ignore[arg-type]
        assert pd_sched.build_connector_meta(None).loads == []  # type: ignore[arg-type,attr-defined]
        cache: dict = {}
        pd_worker.bind_connector_metadata(meta)
        pd_worker.start_load_caches(cache)
        assert cache["img0"].dtype == torch.bfloat16 and torch.equal(cache["img0"], emb)
        assert (e.saved, pd_worker.loaded) == (1, 1)

        # Queued, then Redis goes away before the worker loads it.
        pd_sched.update_state_after_alloc(_request("x", "img0"), 1)
        meta = pd_sched.build_connector_meta(None)  # type: ignore[arg-type]
        redis.stop()
        assert not pd_sched.has_cache_item("img0")  # PD encodes itself instead
        pd_worker.bind_connector_metadata(meta)
        unreachable = r"Redis at redis://127\.0\.0\.1:\d+ unreachable"
        with pytest.raises(ECTransportError, match=unreachable):
            pd_worker.start_load_caches({})
        with pytest.raises(ECTransportError, match="storing img1"):
            e.save_caches({"img1": emb}, "img1")


def test_bad_config_is_named() -> None:
    with pytest.raises(ValueError, match="ec_producer, ec_consumer or ec_both"):
        ec_transfer_args("encoder", "redis://127.0.0.1:1")
    vcfg = SimpleNamespace(
        ec_transfer_config=ECTransferConfig(ec_connector="RedisECTransfer", ec_role="ec_consumer")
    )
    with pytest.raises(ValueError, match="redis_url is required"):
        RedisECTransfer(vcfg, ECConnectorRole.SCHEDULER)  # type: ignore[arg-type]
