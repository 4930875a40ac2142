"""Mappings: for every layer, which devices compute which part of it, and which device owns it.

The one canonical form is :class:`Mappings` (whole numbers); its rules (sizes from part
counts, shares, owners) are :mod:`dse.mapping.rules`, its identity :mod:`dse.mapping.keys`,
its constructors :mod:`dse.mapping.build`, its files :mod:`dse.mapping.autodice`. The
encodings (``chromosomes``) decode genes into it; the model, the runtime and the results read
it.
"""

from __future__ import annotations

from dse.mapping.autodice import from_autodice, to_autodice
from dse.mapping.build import (
    RANDOM_KINDS,
    check,
    from_device_lists,
    from_devices,
    random_mappings,
    remap,
    units,
    whole,
)
from dse.mapping.mappings import Mappings

__all__ = [
    "RANDOM_KINDS",
    "Mappings",
    "check",
    "from_autodice",
    "from_device_lists",
    "from_devices",
    "random_mappings",
    "remap",
    "to_autodice",
    "units",
    "whole",
]
