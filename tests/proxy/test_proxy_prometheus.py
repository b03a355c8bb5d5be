from __future__ import annotations

from agentic_kvc.metrics.prometheus import parse_labels, parse_vllm_metrics

SAMPLE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
vllm:num_requests_running{engine="1",model_name="tiny"} 2.0
vllm:num_requests_waiting{engine="0",model_name="tiny"} 4.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="tiny"} 0.25
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 2000.0
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 1920.0
vllm:prefix_cache_hits_created{engine="0",model_name="tiny"} 1.7e9
vllm:external_prefix_cache_hits_total{engine="0",model_name="tiny"} 64.0
vllm:num_preemptions_total{engine="0",model_name="tiny"} 1.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_compute"} 80.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_cache_hit"} 1920.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="tiny"} 0.0
vllm:cache_config_info{block_size="32",cache_dtype="auto",engine="0",num_gpu_blocks="512"} 1.0
python_gc_objects_collected_total{generation="0"} 123.0
"""


def test_parse_sums_engines_and_averages_kv_usage() -> None:
    m = parse_vllm_metrics(SAMPLE)
    assert m.running == 5
    assert m.waiting == 4
    assert m.kv_usage == 0.375
    assert m.prefix_cache_queries == 2000.0
    assert m.prefix_cache_hits == 1920.0  # the _created series is not added in
    assert m.external_prefix_cache_hits == 64.0
    assert m.external_prefix_cache_queries is None
    assert m.preemptions == 1.0
    assert m.prompt_tokens_by_source == {"local_compute": 80.0, "local_cache_hit": 1920.0}
    assert m.block_size == 32 and m.num_gpu_blocks == 512


def test_missing_metrics_are_none_not_zero() -> None:
    m = parse_vllm_metrics("# nothing here\nother_metric 1\n")
    assert m.running is None and m.kv_usage is None and m.block_size is None


def test_label_escapes() -> None:
    assert parse_labels(r'a="x\"y",b="1"') == {"a": 'x"y', "b": "1"}


TIER_SAMPLE = """\
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="tiny",source="device"} 640.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="tiny",source="host"} 2976.0
vllm:prompt_tokens_cached_by_source_total{engine="1",model_name="tiny",source="host"} 24.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="tiny",source="disk"} 0.0
vllm:prompt_tokens_cached_by_source_created{engine="0",model_name="tiny",source="host"} 1.7e9
"""


def test_cached_tokens_by_source_sum_engines_per_tier() -> None:
    """The engine's own count of prefix-cache hit tokens per tier (issue 30): the tier study
    reads the host tier's from it."""
    m = parse_vllm_metrics(TIER_SAMPLE)
    assert m.cached_tokens_by_source == {"device": 640.0, "host": 3000.0, "disk": 0.0}
    assert m.prompt_tokens_by_source == {}


def test_sampler_writes_tier_counters_only_for_an_engine_that_served_from_one() -> None:
    import asyncio

    from agentic_kvc.serve.sampler import InstanceSampler

    texts = {"http://a": TIER_SAMPLE, "http://b": SAMPLE}

    class _Sampler(InstanceSampler):
        async def _get(self, http, url):  # type: ignore[no-untyped-def]
            return texts[url]

    sampler = _Sampler(["http://a", "http://b"], 1.0, 0.0)
    rows = asyncio.run(sampler.sample_once(None))  # type: ignore[arg-type]
    a, b = (r.to_dict() for r in rows)
    assert a["host_cached_tokens"] == 3000.0 and a["disk_cached_tokens"] == 0.0
    assert "host_cached_tokens" not in b and "disk_cached_tokens" not in b  # no tier: no keys


def test_offload_tier_info_is_read_from_its_labels() -> None:
    """vLLM's SimpleCPUOffloadConnector states its tier in an info gauge: the proxy's estimated
    view sizes its model of the tier from it."""
    lazy = (
        'vllm:simple_kv_offload_info{backend="cpu",capacity_blocks="1048",engine="0",'
        'lazy_offload="true",model_name="tiny",page_cache="false"} 1.0\n'
    )
    m = parse_vllm_metrics(SAMPLE + lazy)
    assert (m.offload_backend, m.offload_lazy, m.offload_blocks) == ("cpu", True, 1048)
    eager = lazy.replace('"cpu"', '"disk"').replace('"true"', '"false"')
    m = parse_vllm_metrics(eager)
    assert (m.offload_backend, m.offload_lazy, m.offload_blocks) == ("disk", False, 1048)
    none = parse_vllm_metrics(SAMPLE)  # no connector, or no step served yet
    assert (none.offload_backend, none.offload_lazy, none.offload_blocks) == (None, None, None)
