from __future__ import annotations

from agentic_kvc.proxy.session import session_from


def test_body_session_id_wins_over_everything() -> None:
    body = {"session_id": "b", "metadata": {"session_id": "m"}, "user": "u"}
    assert session_from(body, [(b"x-session-id", b"h")]) == "b"


def test_metadata_then_headers_then_user() -> None:
    assert session_from({"metadata": {"conversation_id": "c"}, "user": "u"}, []) == "c"
    assert session_from({"user": "u"}, [(b"x-conversation-id", b"h")]) == "h"
    assert session_from({"user": "u"}, []) == "u"
    assert session_from({}, []) is None


def test_header_order_is_documented_order_not_arrival_order() -> None:
    headers = [(b"x-agent-session", b"late"), (b"x-session-id", b"first")]
    assert session_from({}, headers) == "first"


def test_empty_and_non_string_values_are_skipped() -> None:
    body = {"session_id": "", "metadata": {"session_id": None}, "user": ["x"]}
    assert session_from(body, [(b"x-session-id", b"")]) is None
    assert session_from({"session_id": 42}, []) == "42"
    assert session_from({"session_id": True}, []) is None
