"""`RequestRecord.to_dict` / `InstanceSample.to_dict` give what `dataclasses.asdict` gave
(the fields left out when None aside), with containers copied, not shared."""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, fields

import numpy as np

from agentic_kvc.metrics.records import _REQUEST_OMIT, InstanceSample, RequestRecord

SAMPLE_OMIT = ("host_kv_usage", "disk_kv_usage", "host_cached_tokens", "disk_cached_tokens")


@dataclass
class _Inner:
    a: int
    b: list[float]


def _reference(obj: object, omit: tuple[str, ...]) -> dict:
    out = asdict(obj)  # type: ignore[call-overload]
    for key in omit:
        if out[key] is None:
            del out[key]
    return out


def _random_value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(9 if depth < 3 else 5)
    if kind == 0:
        return rng.randrange(-(2**63), 2**63)
    if kind == 1:
        return rng.random()
    if kind == 2:
        return rng.choice(["", "x", "unified"])
    if kind == 3:
        return rng.random() < 0.5
    if kind == 4:
        return None
    if kind == 5:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 6:
        return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.randrange(4))}
    if kind == 7:
        return tuple(_random_value(rng, depth + 1) for _ in range(rng.randrange(3)))
    return _Inner(rng.randrange(10), [rng.random()])


def test_request_records_match_asdict() -> None:
    rng = random.Random(7)
    names = [f.name for f in fields(RequestRecord)]
    for _ in range(300):
        rec = RequestRecord("r1", "s1", 0, 0.5, 100)
        for name in names[5:]:
            if rng.random() < 0.5:
                setattr(rec, name, _random_value(rng))
        rec.scores = {i: _random_value(rng) for i in range(rng.randrange(5))}
        rec.itl_s = [rng.random() for _ in range(rng.randrange(6))]
        got, want = rec.to_dict(), _reference(rec, _REQUEST_OMIT)
        assert got == want
        assert list(got) == list(want)  # key order: the JSON lines' bytes
        assert json.dumps(got) == json.dumps(want)


def test_samples_match_asdict_and_omit_unset_tiers() -> None:
    s = InstanceSample(1.5, 2, running=3, waiting=0, kv_usage=0.25)
    assert s.to_dict() == _reference(s, SAMPLE_OMIT)
    assert "host_kv_usage" not in s.to_dict()
    s.host_kv_usage = 0.0  # set (0 is not None): written
    assert s.to_dict()["host_kv_usage"] == 0.0
    assert list(s.to_dict()) == list(_reference(s, SAMPLE_OMIT))


def test_containers_are_copies_and_other_types_as_asdict() -> None:
    rec = RequestRecord("r1", "s1", 0, 0.0, 10, itl_s=[0.1], scores={"rho": [1.0], "p": (1, [2])})
    rec.reason = np.float64(2.5)  # type: ignore[assignment]  # not a plain leaf: copied as asdict does
    out = rec.to_dict()
    out["itl_s"].append(9.0)
    out["scores"]["rho"].append(9.0)
    assert rec.itl_s == [0.1] and rec.scores["rho"] == [1.0]
    assert out["scores"]["p"] == (1, [2]) and out["scores"]["p"][1] is not rec.scores["p"][1]
    assert out["reason"] == 2.5 and type(out["reason"]) is np.float64
    nested = RequestRecord("r", "s", 0, 0.0, 1, scores={"inner": _Inner(1, [2.0])})
    assert nested.to_dict()["scores"]["inner"] == {"a": 1, "b": [2.0]}
