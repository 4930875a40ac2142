"""Values from a user's files, checked where they enter: one clear line when one is wrong."""

from __future__ import annotations

import math
from typing import Any

from dse.errors import DseError


def number(value: Any, where: str, *, positive: bool = False, integer: bool = False) -> float:
    """``value`` as a finite float (non-negative, or positive), else one clear DseError."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise DseError(f"{where} must be a number, not {value!r}")
    try:
        x = float(value)
    except ValueError:
        raise DseError(f"{where} must be a number, not {value!r}") from None
    except OverflowError:  # an integer of hundreds of digits
        raise DseError(f"{where} must be a finite number, not an integer this large") from None
    if not math.isfinite(x):
        raise DseError(f"{where} must be a finite number, not {value!r}")
    if x < 0 or (positive and x == 0):
        raise DseError(f"{where} must be {'positive' if positive else 'zero or more'}, not {x:g}")
    if integer and x != int(x):
        raise DseError(f"{where} must be a whole number, not {x:g}")
    return x
