"""A figure written as PNG, read back: its pixels, and where one colour of matplotlib shows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.colors import to_rgb
from matplotlib.image import imread


def pixels(path: Path) -> np.ndarray:
    """The PNG's pixels as RGB in 0-255, ``[rows, columns, 3]`` (a file that is not a whole PNG
    raises)."""
    rgba = imread(str(path), format="png")
    return np.round(rgba[..., :3] * 255).astype(np.int64)


def showing(image: np.ndarray, colour: str) -> np.ndarray:
    """Where ``image`` (:func:`pixels`) is exactly ``colour`` ("C0", "k", ...): a mask."""
    rgb = np.round(np.array(to_rgb(colour)) * 255).astype(np.int64)
    return (image == rgb).all(axis=2)
