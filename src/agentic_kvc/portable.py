"""Numerics that give the same bits on every processor (issue 34).

numpy picks a ufunc's kernel at run time from the processor's vector extensions: on an
AVX-512 machine its float64 `exp`, `log`, `pow` and trigonometric loops are numpy's own SIMD
(or SVML) code, elsewhere the C library's. The two agree to an ulp or so, not to the bit, and
one ulp in a think time or a prompt length moves an event and with it every later record.
Likewise a least-squares fit through LAPACK differs in its last bits with the BLAS kernel
(OpenBLAS chooses one per processor). So anything that feeds a simulated record or a fitted
coefficient follows two rules:

- transcendental functions of scalars go through `math` (the C library: one code path on any
  x86-64 machine with the same libc), never through numpy ufuncs;
- a fitted coefficient is rounded to `FIT_SIGNIFICANT_DIGITS` where it is made, far below any
  fit's own error, far above the last-bit noise of the linear algebra that made it.

`tests/sim/test_sim_golden.py` checks both by running the golden cases again with numpy's
optional CPU features and OpenBLAS's kernel switched (docs/simulator.md, "Same results on any
processor").
"""

from __future__ import annotations

import math

# 6 significant digits: a relative step of 1e-6, against fits that err by percents and BLAS
# noise of ~1e-15.
FIT_SIGNIFICANT_DIGITS = 6


def round_significant(value: float, digits: int = FIT_SIGNIFICANT_DIGITS) -> float:
    """`value` rounded to `digits` significant decimal digits (0, inf and nan unchanged)."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))
