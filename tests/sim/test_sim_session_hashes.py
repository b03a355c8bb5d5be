"""Issue 16 levers on the simulator's per-request work that must not change what it computes.

- a session's next prompt extends the previous prompt's engine block hashes instead of hashing
  the whole prompt again: the same list as `engine_block_hashes` for every request;
- the block pool keeps no per-block map until a hash is held twice, and drops it again when
  no hash is (the two representations are property-tested in `test_sim_blocks.py`).
"""

from __future__ import annotations

from pathlib import Path

from agentic_kvc.config import load_config
from agentic_kvc.sim.blocks import BlockPool, BlockTable
from agentic_kvc.sim.fleet import SessionRun, SimFleet
from agentic_kvc.workload import load_workload
from agentic_kvc.workload.tokens import engine_block_hashes

REPO = Path(__file__).resolve().parents[2]


def test_session_hashes_extend_the_previous_turn() -> None:
    config = load_config(
        REPO / "config" / "runs" / "sim_h20_agentic.yaml",
        ["workload.generator.sessions=40", "fleet.block_size=32"],
    )
    workload = load_workload(config.workload, config.seed)
    fleet = SimFleet.__new__(SimFleet)  # only the block size is read
    fleet.bs = config.fleet.block_size
    extended = 0
    for session in workload.sessions:
        srun = SessionRun(session)
        for req in session.requests:
            extended += srun.last_prompt is not None
            assert fleet._prompt_hashes(srun, req) == engine_block_hashes(req, fleet.bs)
    assert extended > 10  # multi-turn sessions were exercised


def test_pool_goes_per_block_only_while_a_hash_is_held_twice() -> None:
    pool = BlockPool(6, 1)
    chain = [11, 12, 13]
    a, b = BlockTable(), BlockTable()
    pool.allocate(a, 3)
    pool.cache(a, 3, lambda lo, hi: chain[lo:hi])
    assert pool._by_block is None and set(pool.heads) == {11}
    pool.allocate(b, 3)  # the same content prefilled again while `a` holds it
    pool.cache(b, 3, lambda lo, hi: chain[lo:hi])
    assert pool._by_block is not None and set(pool.dups) == {11, 12, 13}
    pool.release(b)  # b's copies are free, then reused for other content
    pool.allocate(BlockTable(), 3)
    assert pool._by_block is None and not pool.dups
    assert pool.count_hit(chain) == 3 and pool.cached == dict.fromkeys(chain, a.pieces[0])
