"""The machine a benchmark ran on: its CPU model and its theoretical FP32 peak, with how each factor was found."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def _lscpu() -> dict[str, str]:
    try:
        output = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in output.splitlines()) if v}


def cpu_model() -> str:
    match = re.search(r"^model name\s*:\s*(.+)$", _cpuinfo(), re.MULTILINE)
    return match.group(1).strip() if match else (_lscpu().get("Model name") or "unknown")


def fp32_peak() -> dict[str, Any]:
    """Theoretical FP32 peak = cores × clock × FLOPs/cycle/core, with how each factor was found."""
    info, lscpu = _cpuinfo(), _lscpu()
    flags_line = re.search(r"^flags\s*:\s*(.+)$", info, re.MULTILINE)
    flags = set((flags_line.group(1) if flags_line else lscpu.get("Flags", "")).split())
    if "avx512f" in flags:
        simd, per_cycle, how = "avx512f", 64, "2 FMA units × 16 fp32 lanes × 2 FLOPs per FMA"
    elif {"avx2", "fma"} <= flags:
        simd, per_cycle, how = "avx2+fma", 32, "2 FMA units × 8 fp32 lanes × 2 FLOPs per FMA"
    else:
        simd, per_cycle, how = "sse", 8, "no AVX2/FMA: 8 FLOPs per cycle assumed"

    clock_mhz, clock_source = None, None
    if lscpu.get("CPU max MHz"):
        clock_mhz, clock_source = float(lscpu["CPU max MHz"]), "lscpu 'CPU max MHz'"
    elif re.search(r"^cpu MHz\s*:\s*([\d.]+)", info, re.MULTILINE):
        mhz = re.findall(r"^cpu MHz\s*:\s*([\d.]+)", info, re.MULTILINE)
        clock_mhz, clock_source = max(float(m) for m in mhz), "/proc/cpuinfo 'cpu MHz' (max over CPUs)"
    elif lscpu.get("CPU MHz"):
        clock_mhz, clock_source = float(lscpu["CPU MHz"]), "lscpu 'CPU MHz'"
    else:
        ghz = re.search(r"([\d.]+)\s*GHz", cpu_model())
        if ghz:
            clock_mhz, clock_source = 1000 * float(ghz.group(1)), "model name GHz"
    if clock_mhz is None:
        clock_mhz, clock_source = 2000.0, "unknown: 2.0 GHz assumed"

    logical = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads_per_core = int(lscpu.get("Thread(s) per core", "1") or 1)
    cores = max(1, logical // max(1, threads_per_core))
    gflops = cores * clock_mhz / 1000 * per_cycle
    return {
        "cores": cores,
        "logical_cpus": logical,
        "threads_per_core": threads_per_core,
        "clock_ghz": clock_mhz / 1000,
        "clock_source": clock_source,
        "simd": simd,
        "flops_per_cycle_per_core": per_cycle,
        "gflops": gflops,
        "derivation": (
            f"{cores} cores ({logical} usable CPUs / {threads_per_core} threads per core) × "
            f"{clock_mhz / 1000:.2f} GHz ({clock_source}) × {per_cycle} FLOPs/cycle ({simd}: {how}) "
            f"= {gflops:.1f} GFLOP/s"
        ),
    }


def machine_summary() -> dict[str, Any]:
    return {"cpu": cpu_model(), "fp32_peak": fp32_peak()}
