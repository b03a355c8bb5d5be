"""Accelerator spec sheets: the ratios that derive an unmeasured GPU from a measured one."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    tflops_bf16: float  # dense
    hbm_tb_s: float
    memory_gib: float  # as the driver reports it (spec sheets round it)
    measured_ops: str | None = None  # operator table file (package data) if measured
    derived_from: str | None = None  # the measured GPU this one scales from

    @property
    def flops(self) -> float:
        return self.tflops_bf16 * 1e12

    @property
    def bytes_per_s(self) -> float:
        return self.hbm_tb_s * 1e12

    @property
    def balance(self) -> float:
        """FLOPs per byte at which an op turns from memory- to compute-bound (roofline ridge)."""
        return self.flops / self.bytes_per_s


# NVIDIA spec sheets; H100 80GB HBM3 as measured in data/h100_ops_profile.csv.
HARDWARE: dict[str, HardwareSpec] = {
    h.name: h
    for h in (
        HardwareSpec("h100", 989.0, 3.35, 79.6, measured_ops="h100_ops_profile.csv"),
        HardwareSpec("h20", 148.0, 4.0, 95.6, derived_from="h100"),
    )
}


def get_hardware(name: str) -> HardwareSpec:
    if name not in HARDWARE:
        raise ValueError(f"unknown GPU {name!r}; known: {sorted(HARDWARE)}")
    return HARDWARE[name]
