"""The serving tests' frames: real photographs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.trained import photo_frames


@pytest.fixture(scope="module")
def frames() -> list[dict[str, np.ndarray]]:
    """scikit-learn's two photos, and each mirrored, as the classifier's input ``x``."""
    return photo_frames()
