"""The load a session brings back to its instance, for pricing where a session opens.

A request that opens a session (no cache of its own anywhere) fixes where the session's later turns
run: with KV tiers a router never moves a session afterwards (docs/kv_tiers/study_followups.md, "Why
predicted_ttft trails stickiness on TraceLab"). Today's score prices only the opening turn, so it
may trade a transient (the previous opening's prefill still queued) for one more session on an
instance for the rest of the run. This module measures, per instance, the work that the sessions
homed there bring back per second, from what the router observes:

- a session's turn period T_j: the mean gap between its turns' arrivals (its own once it has
  one; until then the fleet's mean gap over every session; before the fleet has seen any gap,
  its first turn's predicted duration, TTFT plus decode as the policy prices it, plus the
  pause estimator's prior pause, `PauseEstimator.prior_s`, policy/pause.py);
- a session's per-turn work w_j: the engine time of one of its later turns (turn 2 on), as the
  policy's own cost model prices it when routing that turn (the prefill of the tokens its
  instance lacks, plus its decode's marginal step time); until the session has a later turn,
  the fleet's mean over every later turn seen, and before any, its own first turn's;
- lambda_j = 1 / T_j, and per instance rho_i = sum_j lambda_j w_j over the sessions homed there
  (the router's session affinity) that are still live: not finished (the finish signal,
  `RequestView.last_turn`) and not idle far past their period, i.e. the time since their last
  arrival is within the 99th percentile of a lognormal over gaps whose log mean is the
  session's (the fleet's before it has one) and whose log spread is the fleet's (with the
  pause estimator's default spread as one pseudo-gap);
- per instance, by Little's law, the decode load of those sessions: sum_j lambda_j x the
  decode time of the session's latest turn (and its KV tokens likewise).

The stationary queueing wait those sessions imply is the Pollaczek-Khinchine mean wait of an
M/G/1 queue with the sessions as classes of deterministic service:

    W_i = sum_j lambda_j w_j^2 / (2 (1 - rho_i))        (infinite when rho_i >= 1)

It is what a later turn of a session opened on i waits for on average, where the current
queue (`predict_ttft_s` with no prompt) is what this turn waits for now. Nothing here is
fitted: the periods and works are observed, the work is priced by the policy's cost model,
the prior pause is the pause estimator's own, and the 99th percentile only decides when a
silent session stops counting. predicted_ttft's `opening: lifetime` floors an opening's wait
and decode term at these; `lifetime_replace` uses them instead of the instant's (measured on
every tiers cell in docs/kv_tiers/study_followups.md, TraceLab part, section 7: neither is kept
in the study).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import NormalDist

from agentic_kvc.policy.pause import PauseEstimator

_Z_IDLE = NormalDist().inv_cdf(0.99)  # "far past its period": beyond the 99th percentile
_PRIOR_PAUSE_S = PauseEstimator().prior_s  # the pause a router assumes before it sees one
_PRIOR_SIGMA = PauseEstimator().default_sigma  # and the log spread it assumes


@dataclass(slots=True)
class _Session:
    last_s: float
    first_work_s: float  # the opening turn's engine time
    first_span_s: float  # the opening turn's predicted duration (TTFT + decode)
    decode_s: float  # its latest turn's decode time and KV tokens (for Little's law)
    kv: float
    gaps: int = 0  # gaps between its turns = its turns after the first (work observed)
    gap_sum: float = 0.0
    log_gap_sum: float = 0.0
    later_work_s: float = 0.0


@dataclass(slots=True)
class SessionLoad:
    """Per session, its turn gaps and later-turn works as the router sees them, and per
    instance the load its homed sessions bring (`load`)."""

    sessions: dict[str, _Session] = field(default_factory=dict)
    gaps: int = 0  # fleet-wide: gaps between a session's turns (= later turns seen)
    gap_sum: float = 0.0
    log_gap_sum: float = 0.0
    log_gap_sq: float = 0.0
    later_work_s: float = 0.0  # fleet-wide: the later turns' work

    def observe(
        self,
        session_id: str,
        now: float,
        work_s: float,
        span_s: float = 0.0,
        last_turn: bool | None = None,
        decode_s: float = 0.0,
        kv: float = 0.0,
    ) -> None:
        """A turn of the session was routed at `now` and will take `work_s` of engine time
        there, `span_s` predicted from arrival to its last token. The session's first turn
        starts its clock (its work stands in for a later turn's until one is seen); its last
        turn (finish signal) drops it."""
        s = self.sessions.get(session_id)
        if s is None:
            if not last_turn:
                self.sessions[session_id] = _Session(now, work_s, span_s, decode_s, kv)
            return
        s.decode_s, s.kv = decode_s, kv
        gap = max(now - s.last_s, 1e-3)  # (a turn released at once: a millisecond)
        lg = math.log(gap)
        s.last_s = now
        s.gaps += 1
        s.gap_sum += gap
        s.log_gap_sum += lg
        s.later_work_s += work_s
        self.gaps += 1
        self.gap_sum += gap
        self.log_gap_sum += lg
        self.log_gap_sq += lg * lg
        self.later_work_s += work_s
        if last_turn:
            del self.sessions[session_id]

    def _sigma(self) -> float | None:
        """The fleet's standard deviation of log gaps, with the pause estimator's default
        spread as one pseudo-gap (so a few alike gaps do not make it 0); None before a gap."""
        if not self.gaps:
            return None
        mean = self.log_gap_sum / self.gaps
        var = max(self.log_gap_sq / self.gaps - mean * mean, 0.0)
        return math.sqrt((_PRIOR_SIGMA**2 + self.gaps * var) / (1 + self.gaps))

    def load(
        self, now: float, homes: Mapping[str, int], n_instances: int, exclude: str | None = None
    ) -> tuple[list[float], list[float], list[float], list[float]]:
        """Per instance (rho_i, sum_j lambda_j w_j^2) of its live homed sessions other than
        `exclude` (the session being placed)."""
        rho = [0.0] * n_instances
        second = [0.0] * n_instances
        decoding = [0.0] * n_instances
        kv = [0.0] * n_instances
        fleet_gap = self.gap_sum / self.gaps if self.gaps else None
        fleet_work = self.later_work_s / self.gaps if self.gaps else None
        fleet_mu = self.log_gap_sum / self.gaps if self.gaps else 0.0
        sigma = self._sigma()
        for sid, s in self.sessions.items():
            if sid == exclude:
                continue
            home = homes.get(sid)
            if home is None or not 0 <= home < n_instances:
                continue
            if sigma is not None:
                mu = s.log_gap_sum / s.gaps if s.gaps else fleet_mu
                if now - s.last_s > math.exp(mu + _Z_IDLE * sigma):
                    continue  # silent far past its period: it brings nothing now
            if s.gaps:
                period = s.gap_sum / s.gaps
            elif fleet_gap is not None:
                period = fleet_gap
            else:
                period = s.first_span_s + _PRIOR_PAUSE_S
            if s.gaps:
                work = s.later_work_s / s.gaps
            else:
                work = fleet_work if fleet_work is not None else s.first_work_s
            lam = 1.0 / period
            rho[home] += lam * work
            second[home] += lam * work * work
            decoding[home] += lam * s.decode_s
            kv[home] += lam * s.decode_s * s.kv
        return rho, second, decoding, kv


@dataclass(slots=True)
class OpenSessions:
    """The sessions the router has routed a turn of and whose finish signal
    (`RequestView.last_turn`) has not come, counted per instance by where their last routed
    turn went (the router's session affinity): sticky_least_loaded's open-session count,
    kept for a policy that may move a session (its home is then its latest instance). A
    client that never sends the signal keeps its sessions open: none is closed by a guess.
    predicted_ttft's `opening: near_tie` balances openings on it."""

    ids: set[str] = field(default_factory=set)

    def observe(self, session_id: str, last_turn: bool | None) -> None:
        """A turn of the session was routed; its last turn (finish signal) closes it."""
        if last_turn:
            self.ids.discard(session_id)
        else:
            self.ids.add(session_id)

    def per_instance(
        self, homes: Mapping[str, int], n_instances: int, exclude: str | None = None
    ) -> list[int]:
        """Open sessions homed on each instance, other than `exclude` (the one being placed)."""
        out = [0] * n_instances
        for sid in self.ids:
            if sid == exclude:
                continue
            home = homes.get(sid)
            if home is not None and 0 <= home < n_instances:
                out[home] += 1
        return out


def stationary_wait_s(rho: float, second: float) -> float:
    """The M/G/1 (Pollaczek-Khinchine) mean wait: second / (2 (1 - rho)); inf at rho >= 1."""
    if rho >= 1.0:
        return math.inf
    return second / (2.0 * (1.0 - rho))
