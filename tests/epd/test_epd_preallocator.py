"""Preallocator decisions: prefix-covered inputs are declined, FCFS by space, late data freed."""

from __future__ import annotations

from agentic_kvc.epd.preallocator import Metadata, MMInput, PDEncoderCache


def test_prefix_covered_input_is_declined_and_reserves_nothing() -> None:
    pd = PDEncoderCache(capacity=100)
    pd.add_request("a", [MMInput(0, 10), MMInput(20, 10)], num_computed=15)
    pd.prealloc.receive_metadata(Metadata("a", 0, 10, "e0"))
    pd.prealloc.receive_metadata(Metadata("a", 1, 10, "e0"))
    notices = pd.perform_preallocations()
    assert [(n.input_id, n.accepted) for n in notices] == [(0, False), (1, True)]
    assert pd.manager.num_free == 90


def test_fcfs_head_blocks_until_space_frees() -> None:
    pd = PDEncoderCache(capacity=50)
    for r in ("a", "b"):
        pd.add_request(r, [MMInput(0, 40)])
    pd.prealloc.receive_metadata(Metadata("a", 0, 40, "e0"))
    pd.prealloc.receive_metadata(Metadata("b", 0, 40, "e0"))
    assert [n.req_id for n in pd.perform_preallocations()] == ["a"]
    assert pd.perform_preallocations() == []  # b waits: 10 free
    assert pd.on_injected("a", 0)
    pd.on_tokens_computed("a", 40)  # a's embedding consumed: freed
    assert [n.req_id for n in pd.perform_preallocations()] == ["b"]


def test_data_for_an_input_done_meanwhile_is_depreallocated() -> None:
    pd = PDEncoderCache(capacity=50)
    pd.add_request("a", [MMInput(0, 40)])
    pd.prealloc.receive_metadata(Metadata("a", 0, 40, "e0"))
    pd.perform_preallocations()
    pd.on_tokens_computed("a", 40)
    assert not pd.on_injected("a", 0)
    assert pd.manager.num_free == 50


def test_metadata_before_request_waits_and_after_finish_is_declined() -> None:
    pd = PDEncoderCache(capacity=50)
    pd.prealloc.receive_metadata(Metadata("a", 0, 10, "e1"))
    assert pd.perform_preallocations() == []
    pd.add_request("a", [MMInput(0, 10)])
    (n,) = pd.perform_preallocations()
    assert n.accepted and n.target == "e1"
    pd.finish_request("a")
    assert pd.manager.num_free == 50
    pd.prealloc.receive_metadata(Metadata("a", 1, 10, "e1"))
    assert [x.accepted for x in pd.perform_preallocations()] == [False]
