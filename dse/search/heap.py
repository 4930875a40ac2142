"""Keep the search's freed arrays in the process for the next generation (glibc's malloc).

Every generation decodes, copies and evaluates batches of the same few sizes (a DenseNet-121
population of 1,000 on 16 devices: 7.7 MB of part counts, as much of sizes, 3.4 MB of
devices), then frees them. glibc serves such blocks from its heap and, by its adaptive rule,
gives the heap's top back to the kernel once more than twice the largest block freed lies
free there: then the next generation faults every page in again, zeroed, a cost a search at
the thesis's settings pays every generation (``scripts/bench_dse.py``;
``docs/results/performance.md``, "A search at the thesis's settings"). Fixed thresholds
(blocks up to 32 MB from the heap, the heap trimmed only beyond 256 MB free) keep the pages
for reuse; the memory kept is at most what one generation used.

Elsewhere than glibc (no ``mallopt``) this does nothing.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
#: Blocks up to this size come from the heap (glibc's largest allowed on 64-bit systems).
MMAP_THRESHOLD = 32 << 20
#: The heap's top is given back to the kernel only when more than this lies free there.
TRIM_THRESHOLD = 256 << 20

_done = False


def keep_freed_memory() -> bool:
    """Set the thresholds once per process; whether the allocator took them."""
    global _done
    if _done:
        return True
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
    return _done
