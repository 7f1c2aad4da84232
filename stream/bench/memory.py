"""Resident memory of this process, for the suite's cells and the speed rows (Linux ``/proc``,
``getrusage`` elsewhere).

>>> status_mib("VmRSS") is None or status_mib("VmRSS") > 0
True
>>> peak_rss_mib() > 0
True
"""

from __future__ import annotations

import sys

__all__ = ["peak_rss_mib", "reset_peak", "status_mib", "trim"]


def status_mib(field_name: str) -> float | None:
    """A ``/proc/self/status`` memory field (``VmRSS``, ``VmHWM``) in MiB; None if unreadable."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def peak_rss_mib() -> float:
    """This process's peak resident memory in MiB (since the last reset, where supported)."""
    peak = status_mib("VmHWM")
    if peak is not None:
        return peak
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark of this process (Linux >= 4.0); False if it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def trim() -> None:
    """Give freed heap back to the OS (glibc), so a start RSS is what is live."""
    import ctypes
    import gc
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
