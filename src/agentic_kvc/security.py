"""Security posture shared by every server and writer: loopback binds, redaction, path roots.

- Servers the workbench starts (proxy, vLLM, Redis) listen on 127.0.0.1. Listening anywhere
  else takes an explicit option, and `warn_if_exposed` says so in the log.
- Secrets (API keys, tokens, passwords) never reach a manifest or a log: `redact` replaces
  them in nested config/manifest data, `redact_argv` in command lines written to logs.
- Output paths built from config stay inside their results root (`within_root`), so a crafted
  name or a symlink cannot make a run write or delete anywhere else.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("agentic_kvc.security")

REDACTED = "<redacted>"
# Key names that hold secrets: `api_key`, `hf_token`, `HF_TOKEN`, `password`, `secret`, ...
# `token` only as a whole word or suffix, so `max_tokens` and `tokenizer` stay readable.
_SECRET_KEY = re.compile(
    r"(^|[_\-.])(api[_\-]?key|access[_\-]?key|secret([_\-]?key)?|password|passwd|"
    r"auth(orization)?|token|credentials?)$",
    re.IGNORECASE,
)
# Values that are secrets whatever their key: bearer headers and well-known token formats.
_SECRET_VALUE = re.compile(
    r"(Bearer\s+\S+|\bhf_[A-Za-z0-9]{16,}|\bsk-[A-Za-z0-9_\-]{16,}|\bgh[pousr]_[A-Za-z0-9]{20,})"
)
# Command-line flags whose next argument (or `=value`) is a secret.
_SECRET_FLAGS = ("--api-key", "--hf-token", "--token", "--password", "--secret")


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def redact_text(text: str) -> str:
    return _SECRET_VALUE.sub(REDACTED, text)


def redact(obj: Any) -> Any:
    """A copy of `obj` (dicts, lists, strings) with secret-named keys and secret-looking
    values replaced by `<redacted>`; command lines inside are redacted like `redact_argv`."""
    if isinstance(obj, dict):
        return {
            k: (REDACTED if isinstance(k, str) and is_secret_key(k) and v else redact(v))
            for k, v in obj.items()
        }
    if isinstance(obj, list | tuple):
        items = list(obj)
        if items and all(isinstance(x, str) for x in items):
            return redact_argv(items)
        return [redact(x) for x in items]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line fit for a log: the values of secret flags and secret-looking strings
    replaced. The process itself still gets the real argv."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if flag in _SECRET_FLAGS:
            if eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(redact_text(arg))
    return out


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost: may resolve to anything


def warn_if_exposed(host: str, what: str) -> bool:
    """Log a warning when a server is about to listen beyond this machine; True if so."""
    if is_loopback(host):
        return False
    log.warning(
        "%s listens on %s, reachable from other machines; the workbench binds 127.0.0.1 "
        "unless told otherwise (use an API key and a firewall)",
        what,
        host,
    )
    return True


class PathEscape(ValueError):
    """A path built from config would land outside its root."""


def within_root(root: Path, *parts: str) -> Path:
    """`root/parts...`, resolved (symlinks followed), refused unless it stays under `root`."""
    base = Path(root).resolve()
    target = base.joinpath(*parts).resolve()
    if target != base and base not in target.parents:
        raise PathEscape(f"{Path(root).joinpath(*parts)} resolves to {target}, outside {base}")
    return target
