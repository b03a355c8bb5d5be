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


@dataclass(frozen=True)
class TierLinks:
    """Links below HBM (issue 29), GB/s = 1e9 bytes/s, per direction; docs/kv_tiers.md.

    host_*: one instance's device <-> host-memory link; disk_*: one disk store (a drive per
    instance, node or fleet, `fleet.kv_tiers.disk_scope`). A transfer takes latency + bytes /
    bandwidth. `instances_per_node`: GPUs that share a node's host memory and disk.
    """

    host_h2d_gbps: float
    host_d2h_gbps: float
    host_latency_s: float
    disk_read_gbps: float
    disk_write_gbps: float
    disk_latency_s: float
    instances_per_node: int | None  # None: the whole fleet is one host
    source: str


# PCIe Gen5 x16: 32 GT/s x 16 lanes, 128b/130b coding = 63.0 GB/s per direction on the wire;
# DMA copies see about 80% of the 64 GB/s nominal (TLP headers on 256-byte payloads take ~9%,
# flow control and the copy engines the rest), so 51.2 GB/s. Per-transfer latency 10 us: a
# batched block copy's launch and DMA setup. Disk: one datacenter PCIe Gen4 NVMe drive (U.2,
# e.g. Samsung PM9A3 / Micron 7450 class): ~6.5 GB/s sequential read, ~3.5 GB/s write, ~100 us
# to first byte. H20 and H100 (SXM) attach to the host over PCIe Gen5 x16, 8 per HGX node.
_PCIE5_NVME = TierLinks(
    51.2, 51.2, 10e-6, 6.5, 3.5, 100e-6, 8, "PCIe Gen5 x16 at 80% of 64 GB/s; Gen4 NVMe"
)
# The CPU engine's "host tier" is more of its own DRAM: a copy is a memcpy (~10 GB/s one
# thread), 1 us per call; the whole fleet runs on one host.
_CPU_MEMCPY = TierLinks(
    10.0, 10.0, 1e-6, 6.5, 3.5, 100e-6, None, "host memcpy ~10 GB/s one thread; Gen4 NVMe"
)
TIER_LINKS: dict[str, TierLinks] = {
    "h100": _PCIE5_NVME,
    "h20": _PCIE5_NVME,
    "cpu-tiny": _CPU_MEMCPY,
}


def tier_links(hardware: str) -> TierLinks:
    """The links below HBM for `hardware` (a profile's name)."""
    if hardware not in TIER_LINKS:
        raise ValueError(
            f"no KV tier link numbers for hardware {hardware!r}; known: {sorted(TIER_LINKS)} "
            "(set fleet.kv_tiers.host_h2d_gbps etc. or add them to profiles/hardware.py)"
        )
    return TIER_LINKS[hardware]


def get_hardware(name: str) -> HardwareSpec:
    if name not in HARDWARE:
        raise ValueError(f"unknown GPU {name!r}; known: {sorted(HARDWARE)}")
    return HARDWARE[name]
