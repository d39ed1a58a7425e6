"""How much system RAM there is and how much is available now. No Qt, no extra dependency."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class SystemMemory:
    total_bytes: int
    available_bytes: int  # what can be used without swapping (MemAvailable on Linux)


def system_memory() -> SystemMemory:
    try:
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if line.split()[1:]}
        return SystemMemory(info["MemTotal"], info.get("MemAvailable", info.get("MemFree", 0)))
    except (OSError, KeyError, ValueError, IndexError):
        pass
    if hasattr(os, "sysconf"):
        page = os.sysconf("SC_PAGE_SIZE")
        return SystemMemory(os.sysconf("SC_PHYS_PAGES") * page, os.sysconf("SC_AVPHYS_PAGES") * page)
    import ctypes  # Windows

    class MEMORYSTATUSEX(ctypes.Structure):
        _fields_ = [("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong),
                    ("ullTotalPhys", ctypes.c_ulonglong), ("ullAvailPhys", ctypes.c_ulonglong),
                    ("ullTotalPageFile", ctypes.c_ulonglong), ("ullAvailPageFile", ctypes.c_ulonglong),
                    ("ullTotalVirtual", ctypes.c_ulonglong), ("ullAvailVirtual", ctypes.c_ulonglong),
                    ("ullAvailExtendedVirtual", ctypes.c_ulonglong)]

    status = MEMORYSTATUSEX()
    status.dwLength = ctypes.sizeof(MEMORYSTATUSEX)
    ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status))  # type: ignore[attr-defined]
    return SystemMemory(status.ullTotalPhys, status.ullAvailPhys)
