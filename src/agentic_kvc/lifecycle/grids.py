"""The named lifecycle grids (C x N x O x repetitions), without importing vLLM.

`akvc lifecycle run --grid NAME` runs one on real engines (`lifecycle.runner`);
`akvc lifecycle sim-grid` predicts one from the simulator's cost model (`lifecycle.sim_grid`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(slots=True)
class Grid:
    name: str
    cs: list[int]
    ns: list[int]
    os: list[int]
    reps: int = 3
    warmup: int = 1
    max_model_len: int = 4096
    # The engines: the tiny random-weight model on CPU unless the grid names a real model.
    model: str = "tiny"
    device: str = "cpu"

    def cells(self) -> Iterator[tuple[int, int, int]]:
        for c in self.cs:
            for n in self.ns:
                for o in self.os:
                    if c + n + o <= self.max_model_len:
                        yield c, n, o


GRIDS: dict[str, Grid] = {
    # The default report's subset: 3 x 3 x 2 cells, 2 kept repetitions, one warm-up per (C, N).
    "default": Grid("default", [0, 512, 1024], [128, 512, 2048], [1, 8], reps=2, warmup=1),
    "smoke": Grid("smoke", [0, 512], [256], [8], reps=1, warmup=1),
    # The scaled CPU grid (tiny model, 4k context): the example grid, with six N (six
    # transfer sizes, 128 KiB to 3 MiB) so the transfer fit has a range to fit.
    "cpu": Grid(
        "cpu", [0, 512, 1024, 2048], [128, 256, 512, 1024, 2048, 3072], [1, 32, 128], reps=3
    ),
    # The seeds' GPU grid (design 004: C up to 100k, N 512 .. 32k, O up to 512, 5 repetitions;
    # N 1k added between 512 and 2k), on the seeds' model. C + N stays within the design's
    # 132k (k = 1024), so every one of the 6 x 7 x 4 = 168 cells runs. Not run here (CPU).
    "gpu": Grid(
        "gpu",
        [0, 4096, 16_384, 32_768, 65_536, 102_400],
        [512, 1024, 2048, 4096, 8192, 16_384, 32_768],
        [1, 32, 128, 512],
        reps=5,
        warmup=1,
        max_model_len=102_400 + 32_768 + 512,
        model="Qwen/Qwen3-Coder-30B-A3B-Instruct",
        device="cuda",
    ),
}
