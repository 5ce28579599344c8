"""Device cards: the public figures of Gaudi, Gaudi 2 and Gaudi 3 the Gaudi clock runs on.

Sources (docs/gaudi_clock.md cites them in full):
  [HC24]  R. Kaplan, "Intel Gaudi 3 AI Accelerator: Architected for Gen AI Training and Inference",
          Hot Chips 2024: the Gaudi / Gaudi 2 / Gaudi 3 table (peak BF16 60 / 432 / 1835 TFLOPS, FP8
          - / 865 / 1835 TFLOPS,
          HBM 32 / 96 / 128 GB at 0.9 / 2.46 / 3.67 TB/s, PCIe 64 / 64 / 128 GB/s bidirectional,
          NIC 2 / 4.8 / 9.6 Tb/s bidirectional) and the Gaudi 3 sheet (BF16 vector 28.7 TFLOPS,
          8 MME, 64 TPC, 96 MB SRAM).
  [ARCH]  Intel Gaudi documentation, "Gaudi Architecture" (first-gen Gaudi: 8 TPC, 10x100 GbE;
          Gaudi 2: 24 TPC, 2 MME, 48 MB SRAM, 24x100 GbE).
  [TPC]   Intel Gaudi documentation, "TPC User Guide": a TPC's 2048-bit SIMD ALU does 64 fp32 ops
          per cycle (128 bf16).
  [G3WP]  Intel, "Intel Gaudi 3 AI Accelerator White Paper": MME FP32 229, TF32 459 TFLOPS (at 1750 MHz).
  [MLE]   S. Bekman, ml-engineering, compute/accelerator/README.md (third-party): clocks under load
          (Gaudi 2 MME 1650 / TPC 1800 MHz, Gaudi 3 1600 / 1600 MHz), best measured BF16 GEMM (Gaudi 2
          96.9% of peak, Gaudi 3 74.1%).
Everything not in those sources is an *assumption*, marked ``assumed`` in ``Card.notes``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict

TERA = 1e12
GIGA = 1e9


@dataclass(frozen=True)
class Card:
    name: str                       # "gaudi2": the HPU_LAB_DEVICE value
    device_name: str                # "GAUDI2": what torch.hpu.get_device_name() returns
    title: str                      # "Intel Gaudi 2"
    mme_flops: Dict[str, float]     # peak matrix FLOP/s by dtype name
    vector_flops: Dict[str, float]  # peak TPC vector FLOP/s by dtype name
    hbm_bytes: int
    hbm_bw: float                   # bytes/s
    sram_bytes: int
    host_link_bw: float             # bytes/s per direction (PCIe: half the bidirectional figure)
    nic_bw: float                   # bytes/s per direction, all ports of the card
    mme_units: int
    tpc_units: int
    recipe_launch_ns: int           # host-to-device submission + device start of one recipe
    kernel_ns: int                  # fixed cost of one MME/TPC kernel (one node or fused cluster)
    # the share of the calibrated MME efficiency this card's matrix engines reach (1.0: as the
    # calibration cards; Gaudi 3: its measured best GEMM efficiency against Gaudi 2's)
    mme_derate: float = 1.0
    fp32_published: bool = False    # the FP32 matrix rate is a published figure (Gaudi 3 [G3WP]), not assumed
    notes: Dict[str, str] = field(default_factory=dict)

    @property
    def fp8(self) -> bool:
        """Whether the MME has an FP8 mode (Gaudi 2 and 3; not first-gen Gaudi)."""
        return "float8_e4m3fn" in self.mme_flops

    @property
    def fp32_note(self) -> str:
        """What a verdict resting on FP32 matrix work says of the rate it was timed at."""
        if not self.fp32_published:
            return "FP32 matrix rate assumed: 1/4 of BF16"
        return (f"FP32 matrix rate: {self.title}'s published 1/{self.mme_flops['bfloat16'] / self.mme_flops['float32']:.0f} "
                "of BF16; float32 matmul precision assumed")

    def mme_rate(self, dtype: str) -> float:
        if dtype.startswith("float8") and not self.fp8:
            # the bridge's FP8_CHECK (habana_kernels/lazy_kernels.cpp, 1.19.0): device_supports_fp8 is
            # Gaudi 2 / Gaudi 3 only; on first-gen Gaudi an fp8 product cannot run, so it has no cost
            raise RuntimeError(f"FP8 data type is not available on this device. ({self.title} has no FP8 "
                               "matrix mode: an FP8 GEMM cannot be costed on it)")
        return self.mme_flops.get(dtype) or self.mme_flops["float32"]

    def vector_rate(self, dtype: str) -> float:
        return self.vector_flops.get(dtype) or self.vector_flops["float32"]


# The TPC generation of Gaudi 2 and Gaudi 3 is the same design point: 28.7 TFLOPS / 64 TPCs
# = 0.448 TFLOPS per TPC in bf16 [HC24]; Gaudi 2's 24 TPCs are assumed to run at that rate.
_PER_TPC_BF16 = 28.7 * TERA / 64


def _mme(bf16: float, fp32_ratio: float, fp8: float = 0.0) -> Dict[str, float]:
    rates = {"bfloat16": bf16, "float16": bf16, "float32": bf16 * fp32_ratio}
    if fp8:
        rates.update({"float8_e4m3fn": fp8, "float8_e5m2": fp8})
    return rates


def _vec(bf16: float) -> Dict[str, float]:
    # [TPC]: 64 fp32 lanes vs 128 bf16 lanes per cycle -> fp32 at half the bf16 rate
    return {"bfloat16": bf16, "float16": bf16, "float32": bf16 / 2, "int32": bf16 / 2, "int64": bf16 / 4}


GAUDI = Card(
    name="gaudi", device_name="GAUDI", title="Intel Gaudi (first generation)",
    mme_flops=_mme(60 * TERA, 0.25), vector_flops=_vec(8 * _PER_TPC_BF16 * 0.6),
    hbm_bytes=32 * 2**30, hbm_bw=0.9e12, sram_bytes=24 * 2**20,
    host_link_bw=32 * GIGA, nic_bw=125 * GIGA, mme_units=1, tpc_units=8,
    recipe_launch_ns=30_000, kernel_ns=3_000,
    notes={"mme_flops": "BF16 60 TFLOPS [HC24]; fp32 = 1/4 of bf16 (assumed); no FP8 mode ([HC24]: FP8 -; the bridge's "
                         "device_supports_fp8 is Gaudi 2/3 only): costing an FP8 GEMM raises",
           "vector_flops": "8 TPC [ARCH] of an older generation at 0.6x the Gaudi 3 per-TPC rate (assumed)",
           "sram_bytes": "24 MB (assumed)",
           "host_link_bw": "PCIe 64 GB/s bidirectional [HC24] -> 32 GB/s per direction",
           "nic_bw": "2 Tb/s bidirectional [HC24] -> 125 GB/s per direction",
           "recipe_launch_ns": "assumed (not published)", "kernel_ns": "assumed (not published)"})

GAUDI2 = Card(
    name="gaudi2", device_name="GAUDI2", title="Intel Gaudi 2",
    mme_flops=_mme(432 * TERA, 0.25, fp8=865 * TERA), vector_flops=_vec(24 * _PER_TPC_BF16),
    hbm_bytes=96 * 2**30, hbm_bw=2.46e12, sram_bytes=48 * 2**20,
    host_link_bw=32 * GIGA, nic_bw=300 * GIGA, mme_units=2, tpc_units=24,
    recipe_launch_ns=20_000, kernel_ns=2_000,
    notes={"mme_flops": "BF16 432, FP8 865 TFLOPS [HC24]; fp32 = 1/4 of bf16 (assumed)",
           "vector_flops": "24 TPC [ARCH] x 0.448 TFLOPS (the Gaudi 3 per-TPC rate, assumed) = 10.8 TFLOPS bf16",
           "host_link_bw": "PCIe 64 GB/s bidirectional [HC24] -> 32 GB/s per direction",
           "nic_bw": "4.8 Tb/s bidirectional [HC24] -> 300 GB/s per direction",
           "recipe_launch_ns": "assumed (not published)", "kernel_ns": "assumed (not published)"})

# Gaudi 3 as it ships: its MME clock is 1600 MHz, not the 1750 MHz the white paper's 1835 TFLOPS
# need (8 MME x 256x256 MACs x 2 x 1.6 GHz = 1677 TFLOPS), and its TPC clock 1600 MHz ([MLE]: clocks
# reported by hl-smi under load). Its FP32 / TF32 matrix rates are the white paper's 229 / 459
# TFLOPS ([G3WP], at 1750 MHz) scaled to that clock. Its best measured BF16 GEMM reaches 74.1% of the
# 1677 TFLOPS, where Gaudi 2's reaches 96.9% of 432 ([MLE], "Maximum Achievable Matmul FLOPS"):
# mme_derate is their ratio, so the calibrated MME efficiency (fitted on Gaudi 2 and first-gen rows)
# is not carried over to Gaudi 3 as if its engines were as easy to keep busy.
_G3_CLOCK = 1600 / 1750
GAUDI3 = Card(
    name="gaudi3", device_name="GAUDI3", title="Intel Gaudi 3",
    mme_flops={"bfloat16": 1677 * TERA, "float16": 1677 * TERA, "float32": 229 * TERA * _G3_CLOCK,
               "float8_e4m3fn": 1677 * TERA, "float8_e5m2": 1677 * TERA},
    vector_flops=_vec(28.7 * TERA * _G3_CLOCK),
    hbm_bytes=128 * 2**30, hbm_bw=3.67e12, sram_bytes=96 * 2**20,
    host_link_bw=64 * GIGA, nic_bw=600 * GIGA, mme_units=8, tpc_units=64,
    recipe_launch_ns=15_000, kernel_ns=1_500, mme_derate=round(74.1 / 96.9, 3), fp32_published=True,
    notes={"mme_flops": "BF16 and FP8 1835 TFLOPS at 1750 MHz [HC24]; shipped MME clock 1600 MHz [MLE] -> 1677; "
                        "FP32 229 TFLOPS [G3WP] x 1600/1750 = 209",
           "vector_flops": "BF16 vector 28.7 TFLOPS [HC24] x 1600/1750 (TPC clock 1600 MHz [MLE]) = 26.2 TFLOPS",
           "mme_derate": "best BF16 GEMM 74.1% of peak on Gaudi 3 vs 96.9% on Gaudi 2 [MLE] -> 0.765 (third-party)",
           "host_link_bw": "PCIe Gen5 128 GB/s bidirectional [HC24] -> 64 GB/s per direction",
           "nic_bw": "9.6 Tb/s bidirectional [HC24] -> 600 GB/s per direction",
           "recipe_launch_ns": "assumed (not published)", "kernel_ns": "assumed (not published)"})

DEVICES: Dict[str, Card] = {c.name: c for c in (GAUDI, GAUDI2, GAUDI3)}
