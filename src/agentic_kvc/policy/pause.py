"""A router's estimate of a session's next tool pause, and the KV placement hint it gives.

Pause-aware KV placement (issue 29 item 4; docs/kv_tiers/pause_aware.md). A router sees every turn
end (the response's finish) and the session's next arrival, so it knows each pause a session has
taken. Tool latencies are heavy-tailed and a session's own pauses say something about its next one
(a session whose tools took minutes runs slow tools), so per turn the router predicts the pause that
will follow it and tells the engine what to do with the turn's KV when it ends:

- keep: hold it in HBM (retention) for about as long as the pause is likely to last;
- demote: the pause is predicted too long for HBM to wait on it: write the KV below HBM and
  make its blocks the first to be reused, so HBM goes to the sessions that are active.

The estimate works in log space (pauses are roughly lognormal with a Pareto tail): the
session's mean log pause, shrunk towards the fleet's with `prior_weight` pseudo-pauses; the
fleet's own mean starts at `prior_s` (one pseudo-pause) and learns from every pause seen. The
hold time is the estimate's `quantile` under a lognormal whose spread is the fleet's log
standard deviation. Deterministic: no clock, no randomness; the caller passes the time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist


@dataclass(slots=True, frozen=True)
class PauseHint:
    """What the engine does with a turn's KV when it ends: hold it in HBM for `keep_s`
    seconds, or (`demote`) move it below HBM at once."""

    keep_s: float
    demote: bool
    predicted_s: float  # the predicted pause (the estimate's median)


@dataclass(slots=True)
class _Session:
    n: int = 0
    log_sum: float = 0.0
    last_end: float | None = None


@dataclass(slots=True)
class PauseEstimator:
    """Pauses per session as a router observes them (`finished`, `arrived`), and the hint
    for a session's next turn (`hint`).

    keep_max_s: a predicted pause longer than this demotes (and no hold lasts longer).
    """

    keep_max_s: float = 30.0
    prior_s: float = 5.0
    prior_weight: float = 1.0
    quantile: float = 0.8
    default_sigma: float = 1.0  # log-space spread until the fleet has seen two pauses
    sessions: dict[str, _Session] = field(default_factory=dict)
    n: int = 0  # pauses observed, fleet-wide
    log_sum: float = 0.0
    log_sq: float = 0.0

    def __post_init__(self) -> None:
        if self.keep_max_s <= 0 or self.prior_s <= 0 or self.prior_weight <= 0:
            raise ValueError(
                f"pause estimator: keep_max_s, prior_s and prior_weight must be > 0: "
                f"{self.keep_max_s}, {self.prior_s}, {self.prior_weight}"
            )
        if not 0 < self.quantile < 1:
            raise ValueError(f"pause estimator: quantile must be in (0, 1): {self.quantile}")

    def finished(self, session_id: str, now: float) -> None:
        """A turn of the session finished at `now`: a pause starts (if another turn comes)."""
        self.sessions.setdefault(session_id, _Session()).last_end = now

    def arrived(self, session_id: str, now: float) -> float | None:
        """The session's next turn arrived at `now`: the pause since its last turn ended is
        observed (returned; None for a first turn)."""
        s = self.sessions.setdefault(session_id, _Session())
        if s.last_end is None:
            return None
        pause = max(now - s.last_end, 1e-3)  # (a turn released at once: a millisecond)
        s.last_end = None
        lp = math.log(pause)
        s.n += 1
        s.log_sum += lp
        self.n += 1
        self.log_sum += lp
        self.log_sq += lp * lp
        return pause

    def forget(self, session_id: str) -> None:
        """The session ended (its last turn): drop its state."""
        self.sessions.pop(session_id, None)

    def fleet_mu(self) -> float:
        """The fleet's mean log pause, with `prior_s` as one pseudo-pause."""
        return (math.log(self.prior_s) + self.log_sum) / (1 + self.n)

    def sigma(self) -> float:
        """The fleet's standard deviation of log pauses (`default_sigma` before two)."""
        if self.n < 2:
            return self.default_sigma
        mean = self.log_sum / self.n
        return math.sqrt(max(self.log_sq / self.n - mean * mean, 0.0))

    def mu(self, session_id: str) -> float:
        """The session's mean log pause, shrunk towards the fleet's."""
        s = self.sessions.get(session_id)
        n, total = (s.n, s.log_sum) if s is not None else (0, 0.0)
        w = self.prior_weight
        return (w * self.fleet_mu() + total) / (w + n)

    def hint(self, session_id: str) -> PauseHint:
        """What to do with the KV of the session's turn being routed now, when it ends."""
        mu = self.mu(session_id)
        median = math.exp(mu)
        if median > self.keep_max_s:
            return PauseHint(0.0, True, median)
        z = NormalDist().inv_cdf(self.quantile)
        keep = min(math.exp(mu + z * self.sigma()), self.keep_max_s)
        return PauseHint(keep, False, median)
