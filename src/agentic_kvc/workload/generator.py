"""The agentic session generator: closed-loop coding-agent sessions with growing contexts.

A session is an agent working on one task. Turn 0 is cold: a system prompt every session
shares, then a repository dump and the task (about 20k new tokens). Each later turn re-sends
the whole context plus the previous answer (the tool call) and the tool's output, released
after a tool wait. The defaults reproduce the shape of the coding-agent traces the routing
designs were built on (see docs/workloads.md): about 55% of requests are cold first turns
averaging ~17.7k new tokens, about 22% hit the cache for over 90% of their prompt and need
~1.3k new tokens, and about 92% of HEAVY requests (>= 20k new tokens) are first turns.

Every session draws from its own random stream (seeded by (seed, session index)), so the first
N sessions are the same whatever the total, and the same seed gives a byte-identical file.
Sessions start as a Poisson process; a later turn's `arrival_s` is its nominal release time
(`timing.release_after`), its `think_s` the tool wait that closed-loop replay uses.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentic_kvc.workload.model import Block, Request, Session, Workload
from agentic_kvc.workload.timing import release_after

SYSTEM_BLOCK_ID = 0
_IDS_PER_SESSION = 1 << 24  # block ids of session i live in [1 + i * 2^24, 1 + (i + 1) * 2^24)


class SynthParams(BaseModel):
    """Generator parameters (tokens are model tokens; times are seconds)."""

    model_config = ConfigDict(extra="forbid")

    session_rate_per_s: float = Field(0.5, gt=0, description="Poisson rate of session starts")
    system_prompt_tokens: int = Field(2048, ge=0, description="shared by every session")
    first_turn_median_tokens: int = Field(16_000, ge=1, description="repo dump, lognormal")
    first_turn_sigma: float = Field(0.45, ge=0)
    first_turn_min_tokens: int = Field(1024, ge=1)
    first_turn_max_tokens: int = Field(120_000, ge=1)
    user_message_median_tokens: int = Field(150, ge=1, description="the task / a user turn")
    user_message_sigma: float = Field(0.8, ge=0)
    user_message_each_turn: bool = Field(False, description="chat: a user message every turn")
    continue_prob: float = Field(0.44, ge=0, lt=1, description="P(another turn); geometric")
    max_turns: int = Field(40, ge=1)
    max_context_tokens: int = Field(200_000, ge=1, description="a session ends beyond this")
    output_median_tokens: int = Field(400, ge=1)
    output_sigma: float = Field(0.7, ge=0)
    output_max_tokens: int = Field(8192, ge=1)
    tool_outputs: bool = Field(True, description="append a tool result every later turn")
    tool_large_prob: float = Field(0.57, ge=0, le=1, description="P(a big tool output)")
    tool_small_median_tokens: int = Field(600, ge=1)
    tool_small_sigma: float = Field(0.7, ge=0)
    tool_large_median_tokens: int = Field(4000, ge=1)
    tool_large_sigma: float = Field(1.05, ge=0)
    tool_output_max_tokens: int = Field(100_000, ge=1)
    tool_wait_median_s: float = Field(2.0, gt=0, description="think/tool wait, lognormal")
    tool_wait_sigma: float = Field(1.0, ge=0)
    # Off by default (and then absent from the workload's metadata, so files keep their
    # bytes): a Pareto tail on tool waits, and subagents that fan out and join.
    tool_wait_tail_prob: float = Field(
        0.0, ge=0, le=1, description="P(a tool wait is drawn from the Pareto tail instead)"
    )
    tool_wait_tail_alpha: float = Field(1.2, gt=0, description="Pareto shape of the tail")
    tool_wait_tail_min_s: float = Field(10.0, gt=0, description="where the tail starts")
    tool_wait_max_s: float = Field(600.0, gt=0, description="clamp of a tail wait")
    subagent_prob: float = Field(0.0, ge=0, le=1, description="P(a turn spawns subagents)")
    subagent_fanout_max: int = Field(4, ge=1, description="subagents per spawn: 1..this")
    subagent_task_median_tokens: int = Field(1500, ge=1, description="a subagent's task")
    subagent_continue_prob: float = Field(0.7, ge=0, lt=1, description="its geometric turns")
    subagent_max_turns: int = Field(12, ge=1)
    subagent_result_max_tokens: int = Field(2000, ge=1, description="result joined back")


# New parameters whose default leaves the generator's output as it was before them.
_OPTIONAL_DEFAULTS = {
    name: SynthParams.model_fields[name].default
    for name in (
        "tool_wait_tail_prob",
        "tool_wait_tail_alpha",
        "tool_wait_tail_min_s",
        "tool_wait_max_s",
        "subagent_prob",
        "subagent_fanout_max",
        "subagent_task_median_tokens",
        "subagent_continue_prob",
        "subagent_max_turns",
        "subagent_result_max_tokens",
    )
}


PRESETS: dict[str, dict[str, Any]] = {
    # Coding agent: cold repo dump, tool-call loop (the defaults).
    "agentic-coding": {},
    # Chat assistant: short prompts, more turns, a human reading and typing between turns.
    "chat": {
        "system_prompt_tokens": 600,
        "first_turn_median_tokens": 300,
        "first_turn_sigma": 1.0,
        "first_turn_min_tokens": 8,
        "user_message_median_tokens": 120,
        "user_message_each_turn": True,
        "continue_prob": 0.75,
        "max_turns": 30,
        "output_median_tokens": 300,
        "tool_outputs": False,
        "tool_wait_median_s": 20.0,
        "tool_wait_sigma": 0.8,
    },
    # Coding agent with heavier tails: bigger spread of repo dumps, tool outputs and answers.
    "heavy-tail": {
        "first_turn_sigma": 1.0,
        "continue_prob": 0.6,
        "output_sigma": 1.0,
        "tool_large_prob": 0.5,
        "tool_large_sigma": 1.6,
        "tool_wait_sigma": 1.5,
    },
    # Long-context coding agent (Claude Code / Codex style): one cold ~20k-token turn, then a
    # long tool loop (~14 turns on average) whose context grows by a few k tokens a turn, so
    # later turns carry 50k+ prompts of which > 90% is the previous context. Lengths follow
    # TraceLab's sanitized sessions (docs/workloads.md); fewer sessions start per second
    # because each one lasts much longer.
    "agentic-long": {
        "session_rate_per_s": 0.1,
        "first_turn_median_tokens": 20_000,
        "first_turn_sigma": 0.35,
        "continue_prob": 0.93,
        "max_turns": 60,
        "max_context_tokens": 160_000,
        "output_median_tokens": 300,
        "output_sigma": 0.9,
        "tool_large_prob": 0.4,
        "tool_small_median_tokens": 500,
        "tool_large_median_tokens": 3_000,
        "tool_large_sigma": 0.9,
        "tool_output_max_tokens": 40_000,
        "tool_wait_median_s": 3.0,
        "tool_wait_sigma": 1.2,
    },
    # Coding agent that delegates (Claude Code's Task tool, Codex's spawned threads): a third
    # of its turns fan out 1-4 subagents that run in parallel and join, and tool waits have
    # a Pareto tail (builds, test suites, a human approving a command).
    "agentic-subagents": {
        "continue_prob": 0.8,
        "subagent_prob": 0.3,
        "tool_wait_tail_prob": 0.1,
    },
}


def resolve_params(preset: str, params: dict[str, Any] | None = None) -> SynthParams:
    """The preset's parameters with `params` on top; errors name the preset or the field."""
    if preset not in PRESETS:
        raise ValueError(f"unknown generator preset {preset!r}; one of {', '.join(PRESETS)}")
    try:
        return SynthParams(**{**PRESETS[preset], **(params or {})})
    except ValidationError as exc:
        errs = "; ".join(
            f"field 'params.{'.'.join(str(p) for p in e['loc'])}': {e['msg']}" for e in exc.errors()
        )
        raise ValueError(f"generator preset {preset!r}: {errs}") from None


def _lognormal_int(rng: np.random.Generator, median: float, sigma: float, lo: int, hi: int) -> int:
    value = median * math.exp(sigma * rng.standard_normal())
    return int(min(hi, max(lo, round(value))))


class _SessionBuilder:
    def __init__(self, p: SynthParams, index: int, seed: int, start_s: float) -> None:
        self.p = p
        self.seed, self.index = seed, index
        self.rng = np.random.default_rng([seed, 1, index])
        self.sid = f"s{index:06d}"
        self.next_id = 1 + index * _IDS_PER_SESSION
        self.start_s = start_s

    def block(self, tokens: int) -> Block:
        b = Block(self.next_id, tokens)
        self.next_id += 1
        return b

    def output_tokens(self) -> int:
        p = self.p
        return _lognormal_int(
            self.rng, p.output_median_tokens, p.output_sigma, 1, p.output_max_tokens
        )

    def user_message(self) -> Block:
        p = self.p
        n = _lognormal_int(
            self.rng, p.user_message_median_tokens, p.user_message_sigma, 1, p.max_context_tokens
        )
        return self.block(n)

    def tool_output(self) -> Block:
        p, rng = self.p, self.rng
        if rng.random() < p.tool_large_prob:
            median, sigma = p.tool_large_median_tokens, p.tool_large_sigma
        else:
            median, sigma = p.tool_small_median_tokens, p.tool_small_sigma
        return self.block(_lognormal_int(rng, median, sigma, 1, p.tool_output_max_tokens))

    def tool_wait(self) -> float:
        p, rng = self.p, self.rng
        wait = p.tool_wait_median_s * math.exp(p.tool_wait_sigma * rng.standard_normal())
        if p.tool_wait_tail_prob > 0:  # drawn from a stream of its own: the body is unchanged
            tail = self.tail_rng
            if tail.random() < p.tool_wait_tail_prob:
                wait = min(
                    p.tool_wait_tail_min_s * (1.0 + tail.pareto(p.tool_wait_tail_alpha)),
                    p.tool_wait_max_s,
                )
        return wait

    def build(self) -> list[Session]:
        """The session, then its subagent sessions (if any) in spawn order."""
        p, rng = self.p, self.rng
        self.tail_rng = np.random.default_rng([self.seed, 3, self.index])
        sub_rng = np.random.default_rng([self.seed, 2, self.index])
        children: list[Session] = []
        n_turns = 1
        while n_turns < p.max_turns and rng.random() < p.continue_prob:
            n_turns += 1
        context: list[Block] = []
        if p.system_prompt_tokens:
            context.append(Block(SYSTEM_BLOCK_ID, p.system_prompt_tokens))
        dump = _lognormal_int(
            rng,
            p.first_turn_median_tokens,
            p.first_turn_sigma,
            p.first_turn_min_tokens,
            p.first_turn_max_tokens,
        )
        context += [self.block(dump), self.user_message()]
        requests: list[Request] = []
        joined: list[Session] = []  # subagents spawned by the previous turn, to join now
        for turn in range(n_turns):
            if turn:
                prev = requests[-1]
                context.append(self.block(prev.output_tokens))  # the answer (a tool call)
                if joined:  # the Task tool's results: each subagent's last answer
                    context.extend(
                        self.block(min(c.requests[-1].output_tokens, p.subagent_result_max_tokens))
                        for c in joined
                    )
                elif p.tool_outputs:
                    context.append(self.tool_output())
                if p.user_message_each_turn:
                    context.append(self.user_message())
            n_in = sum(b.tokens for b in context)
            if n_in > p.max_context_tokens and requests:
                break  # the agent's context is full: the session ends
            think = self.tool_wait() if turn else 0.0
            arrival = self.start_s if not turn else release_after(requests[-1], think)
            if joined:
                arrival = max([arrival, *(release_after(c.requests[-1], think) for c in joined)])
            requests.append(
                Request(
                    request_id=f"{self.sid}-t{turn:03d}",
                    session_id=self.sid,
                    turn=turn,
                    input_tokens=n_in,
                    output_tokens=self.output_tokens(),
                    blocks=tuple(context),
                    arrival_s=arrival,
                    think_s=think,
                    parent_id=requests[-1].request_id if turn else None,
                    depends_on=tuple(c.requests[-1].request_id for c in joined),
                )
            )
            joined = []
            if p.subagent_prob > 0 and turn + 1 < n_turns and sub_rng.random() < p.subagent_prob:
                fanout = 1 + int(sub_rng.integers(p.subagent_fanout_max))
                joined = [
                    self.subagent(sub_rng, requests[-1], len(children) + k) for k in range(fanout)
                ]
                children.extend(joined)
        return [Session(self.sid, requests), *children]

    def subagent(self, rng: np.random.Generator, spawner: Request, index: int) -> Session:
        """A subagent spawned by `spawner`: the shared system prompt, its own task, its own
        tool loop; its first turn waits for the spawner's answer (the Task tool call)."""
        p = self.p
        sid = f"{self.sid}-a{index:03d}"
        context: list[Block] = []
        if p.system_prompt_tokens:
            context.append(Block(SYSTEM_BLOCK_ID, p.system_prompt_tokens))
        task = _lognormal_int(rng, p.subagent_task_median_tokens, 0.6, 16, p.max_context_tokens)
        context.append(self.block(task))
        n_turns = 1
        while n_turns < p.subagent_max_turns and rng.random() < p.subagent_continue_prob:
            n_turns += 1
        requests: list[Request] = []
        for turn in range(n_turns):
            if turn:
                context.append(self.block(requests[-1].output_tokens))
                big = rng.random() < p.tool_large_prob
                median = p.tool_large_median_tokens if big else p.tool_small_median_tokens
                sigma = p.tool_large_sigma if big else p.tool_small_sigma
                context.append(
                    self.block(_lognormal_int(rng, median, sigma, 1, p.tool_output_max_tokens))
                )
            n_in = sum(b.tokens for b in context)
            if n_in > p.max_context_tokens and requests:
                break
            think = (
                p.tool_wait_median_s * math.exp(p.tool_wait_sigma * rng.standard_normal())
                if turn
                else 0.0
            )
            prev = requests[-1] if requests else spawner
            requests.append(
                Request(
                    request_id=f"{sid}-t{turn:03d}",
                    session_id=sid,
                    turn=turn,
                    input_tokens=n_in,
                    output_tokens=_lognormal_int(
                        rng, p.output_median_tokens, p.output_sigma, 1, p.output_max_tokens
                    ),
                    blocks=tuple(context),
                    arrival_s=release_after(prev, think),
                    think_s=think,
                    parent_id=requests[-1].request_id if turn else None,
                    depends_on=() if turn else (spawner.request_id,),
                )
            )
        return Session(sid, requests, parent_session_id=self.sid)


def synthesize(
    preset: str = "agentic-coding",
    sessions: int = 16,
    seed: int = 0,
    params: dict[str, Any] | None = None,
) -> Workload:
    """Generate `sessions` sessions of `preset` (with `params` overrides) from `seed`."""
    if sessions < 1:
        raise ValueError(f"sessions must be >= 1, got {sessions}")
    p = resolve_params(preset, params)
    gaps = np.random.default_rng([seed, 0]).exponential(1.0 / p.session_rate_per_s, sessions)
    gaps[0] = 0.0
    starts = np.cumsum(gaps)
    out = [
        s for i in range(sessions) for s in _SessionBuilder(p, i, seed, float(starts[i])).build()
    ]
    dumped = p.model_dump(mode="json")
    for name, default in _OPTIONAL_DEFAULTS.items():
        if dumped[name] == default:
            del dumped[name]
    meta = {
        "format": "native",
        "generator": {
            "preset": preset,
            "sessions": sessions,
            "seed": seed,
            "params": dumped,
        },
    }
    return Workload(out, meta=meta)
