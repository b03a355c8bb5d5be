"""Session identity: configuration, each agent's header convention, body fields, the prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_kvc.proxy.session import (
    AGENT_HEADERS,
    PARENT_HEADERS,
    PrefixSessions,
    identify,
    session_from,
)


@pytest.mark.parametrize(
    ("header", "agent"),
    [
        (b"x-claude-code-session-id", "Claude Code"),
        (b"x-opencode-session", "OpenCode"),
        (b"session_id", "Codex"),
        (b"session-id", "Codex (hyphenated)"),
        (b"x-session-id", "generic"),
        (b"x-session-affinity", "generic"),
        (b"x-conversation-id", "generic"),
    ],
)
def test_each_agent_header_names_the_session_and_the_record_says_which(
    header: bytes, agent: str
) -> None:
    ident = identify({"user": "someone"}, [(b"user-agent", b"x"), (header, b"conv-1")])
    assert ident.session == "conv-1", agent
    assert ident.source == f"header:{header.decode()}"


def test_agent_header_beats_generic_header_and_body() -> None:
    headers = [(b"x-session-id", b"generic"), (b"x-claude-code-session-id", b"claude")]
    ident = identify({"session_id": "body"}, headers)
    assert (ident.session, ident.source) == ("claude", "header:x-claude-code-session-id")


def test_configured_header_comes_first() -> None:
    headers = [(b"x-claude-code-session-id", b"claude"), (b"x-my-team-session", b"mine")]
    ident = identify({}, headers, session_header="X-My-Team-Session")
    assert (ident.session, ident.source) == ("mine", "config")
    # configured but absent: the conventions still apply
    assert identify({}, headers[:1], session_header="x-my-team-session").session == "claude"


def test_body_fields_in_order() -> None:
    assert identify({"session_id": "b", "user": "u"}, []).source == "body:session_id"
    meta = {"metadata": {"conversation_id": "c"}, "user": "u"}
    assert (identify(meta, []).session, identify(meta, []).source) == (
        "c",
        "body:metadata.conversation_id",
    )
    # Claude Code (before its session header) put the session at the end of metadata.user_id
    claude = {"metadata": {"user_id": "user_ab12_account_77_session_5f0e-aa"}}
    assert identify(claude, []).session == "5f0e-aa"
    assert identify(claude, []).source == "body:metadata.user_id"
    assert identify({"metadata": {"user_id": "plain-user"}}, []).session is None
    assert identify({"user": "u"}, []).source == "body:user"
    assert identify({}, []) == identify({}, [(b"x-session-id", b"")])
    assert identify({}, []).session is None and identify({}, []).source is None


def test_parent_session_from_headers_or_body() -> None:
    assert identify({}, [(b"x-parent-session-id", b"p")]).parent == "p"
    assert identify({}, [(b"x-codex-parent-thread-id", b"t")]).parent == "t"
    assert identify({"metadata": {"parent_session_id": "m"}}, []).parent == "m"
    assert identify({}, []).parent is None


_VALUES = st.one_of(st.none(), st.text(max_size=3), st.integers(-2, 2), st.booleans())
_BODIES = st.dictionaries(
    st.sampled_from(["session_id", "user", "parent_session_id", "prompt", "model", "metadata"]),
    st.one_of(
        _VALUES,
        st.dictionaries(
            st.sampled_from(["session_id", "conversation_id", "user_id", "parent_session_id", "x"]),
            st.one_of(_VALUES, st.just("u_1_account_2_session_s3")),
        ),
    ),
)
_HEADERS = st.lists(
    st.tuples(
        st.sampled_from(
            [n for n, _ in AGENT_HEADERS] + list(PARENT_HEADERS) + [b"user-agent", b"accept"]
        ),
        st.sampled_from([b"", b"v", b"w"]),
    ),
    max_size=4,
)


@settings(max_examples=300)
@given(body=_BODIES, headers=_HEADERS)
def test_the_no_session_shortcut_answers_as_the_full_lookup(
    body: dict[str, object], headers: list[tuple[bytes, bytes]]
) -> None:
    # A configured header that is never sent turns the shortcut off and changes nothing else.
    assert identify(body, headers) == identify(body, headers, session_header="x-never-sent")


class _Recording(dict):  # type: ignore[type-arg]
    """A body that remembers every top-level key looked up in it."""

    def __init__(self, *a: object) -> None:
        super().__init__(*a)
        self.read: set[str] = set()

    def get(self, key: str, default: object = None) -> object:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> object:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


def test_the_shortcut_lists_every_body_field_the_full_lookup_reads() -> None:
    # The shortcut answers "no session" for a body with none of `_SESSION_FIELDS`; a field the
    # full lookup starts to read must join that list, or its requests would skip it.
    from agentic_kvc.proxy.session import _SESSION_FIELDS

    body = _Recording({"model": "m", "metadata": {"x": 1}})
    identify(body, [], session_header="x-never-sent")  # the full lookup, no shortcut
    assert body.read and body.read <= set(_SESSION_FIELDS)
    assert set(_SESSION_FIELDS) <= body.read  # and it lists nothing the lookup never reads


def test_every_field_and_header_read_names_something() -> None:
    none = identify({}, [(b"user-agent", b"curl")])
    assert none.session is None and none.parent is None
    for field in ("session_id", "user", "parent_session_id"):
        assert identify({field: "v"}, []) != none, field
    for key in ("session_id", "conversation_id", "parent_session_id"):
        assert identify({"metadata": {key: "v"}}, []) != none, key
    for name in [n for n, _ in AGENT_HEADERS] + list(PARENT_HEADERS):
        assert identify({}, [(name, b"v")]) != none, name


def test_session_from_keeps_its_old_contract() -> None:
    assert session_from({"session_id": 42}, []) == "42"
    assert session_from({"session_id": True}, []) is None
    headers = [(b"x-agent-session", b"late"), (b"x-session-id", b"first")]
    assert session_from({}, headers) == "first"


def _chain(tokens: list[int], bs: int = 4) -> list[int]:
    """Stand-in chained block keys: block j's key names the whole prefix through block j."""
    return [hash(tuple(tokens[: (j + 1) * bs])) for j in range(len(tokens) // bs)]


def test_prefix_sessions_follow_prompt_extension_not_shared_system_prompts() -> None:
    ps = PrefixSessions()
    system = list(range(16))
    a0 = [*system, 100, 101, 102, 103, 104, 105]
    b0 = [*system, 200, 201, 202, 203]
    sa = ps.derive(_chain(a0))
    ps.remember(_chain(a0), sa)
    sb = ps.derive(_chain(b0))
    assert sa and sb and sa != sb  # a shared system prompt does not merge sessions
    ps.remember(_chain(b0), sb)
    a1 = a0 + [7] * 9  # turn 1 re-sends turn 0 whole, plus answer and tool output
    assert ps.derive(_chain(a1)) == sa
    ps.remember(_chain(a1), sa)
    a2 = a1 + [8] * 12
    assert ps.derive(_chain(a2)) == sa
    assert ps.derive(_chain(b0 + [9] * 8)) == sb
    assert ps.derive([]) is None


def test_prefix_sessions_forget_oldest_beyond_capacity() -> None:
    ps = PrefixSessions(capacity=2)
    for k in range(3):
        ps.remember([k], f"s{k}")
    assert len(ps) == 2 and ps.find([0]) is None and ps.find([2]) == "s2"


def _records(proxy) -> list[dict]:
    proxy.app.records.flush()
    return [json.loads(line) for line in Path(proxy.app.settings.records).read_text().splitlines()]


def test_requests_without_any_id_still_route_with_affinity(make_proxy) -> None:
    """Two interleaved agent sessions whose requests carry no id: each session keeps to one
    instance, its later turns hit the cache there, and the records say the prompt named it."""
    proxy, client = make_proxy(policy="consistent_hash")  # keyed by session id
    system = list(range(1, 129))  # 8 blocks shared by both sessions
    contexts = {
        "a": system + list(range(1000, 1160)),
        "b": system + list(range(5000, 5200)),
    }
    homes: dict[str, set[str]] = {"a": set(), "b": set()}
    for turn in range(4):
        for name in ("a", "b"):
            if turn:
                contexts[name] = contexts[name] + [turn * 7 + len(name)] * 40
            r = client.post("/v1/completions", json={"prompt": contexts[name], "max_tokens": 1})
            assert r.status_code == 200
            homes[name].add(r.headers["x-akvc-decode"])
    recs = _records(proxy)
    assert {r["session_source"] for r in recs} == {"prefix"}
    by_session: dict[str, list[dict]] = {}
    for r in recs:
        by_session.setdefault(r["session_id"], []).append(r)
    assert len(by_session) == 2
    assert sorted(len(v) for v in by_session.values()) == [4, 4]
    for rows in by_session.values():
        assert [r["turn"] for r in rows] == [0, 1, 2, 3]
        assert len({r["decode_instance"] for r in rows}) == 1  # affinity held
        assert all(r["cached_tokens"] > 0 for r in rows[1:])  # and it paid off
    assert all(len(h) == 1 for h in homes.values())


def test_record_names_the_agent_header_through_the_proxy(make_proxy) -> None:
    proxy, client = make_proxy(policy="round_robin", session_header="x-team-session")
    for headers in (
        {"x-claude-code-session-id": "cc-1", "x-claude-code-parent-agent-id": "root"},
        {"x-team-session": "mine", "x-opencode-session": "oc-1"},
        {"session_id": "codex-1"},
    ):
        r = client.post(
            "/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 1}, headers=headers
        )
        assert r.status_code == 200
    recs = _records(proxy)
    got = [(r["session_id"], r["session_source"], r["parent_session_id"]) for r in recs]
    assert got == [
        ("cc-1", "header:x-claude-code-session-id", "root"),
        ("mine", "config", None),
        ("codex-1", "header:session_id", None),
    ]
