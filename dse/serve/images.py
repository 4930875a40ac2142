"""A served model's inputs read from files: images, ``.npy`` and ``.npz`` arrays.

* an image (any format Pillow opens: ``.jpg``, ``.png``, ``.bmp``, ...) for a model with one
  image input (shape ``1xCxHxW`` or ``1xHxWxC``, ``C`` 3 or 1): decoded to RGB (to grey, ``L``,
  for one channel; EXIF orientation is not applied), resized bilinearly to ``H x W`` by Pillow,
  then to float32 and, per channel, ``(pixel x scale - mean) / std`` (:class:`Preprocess`),
  laid out as the port wants and cast to its dtype;
* a ``.npy`` array for a model with one input: the input as it is, of the port's shape (or
  without its leading 1) and dtype;
* a ``.npz`` of arrays by input name, for a model with any number of inputs: every input once,
  each as a ``.npy``.

Neither ``.npy`` nor ``.npz`` may hold pickled objects. A file that cannot be used (not an
image, truncated, of another shape or dtype, ...) is a :class:`~dse.errors.DseError`: one line
naming the file and the problem.
"""

from __future__ import annotations

import functools
import io
import math
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dse.errors import DseError
from dse.paths import shown

#: ImageNet's per-channel mean and standard deviation of pixels scaled to [0, 1] (RGB).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: The array files' suffixes (an image's are Pillow's: :func:`image_suffixes`).
ARRAY_SUFFIXES = (".npy", ".npz")


class Port(Protocol):
    """A model input as a deployment describes it (:class:`dse.serve.Deployment` ``.inputs``)."""

    @property
    def name(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> np.dtype: ...


@dataclass(frozen=True)
class Preprocess:
    """How an image's pixels become a model's input: per channel,
    ``(pixel x scale - mean) / std``, with the pixel in 0..255.

    * ``scale``: 1/255 by default (pixels to [0, 1]);
    * ``mean``, ``std``: ImageNet's by default (R, G, B: 0.485, 0.456, 0.406 and 0.229, 0.224,
      0.225); one value for every channel, or one per channel of the model's input.

    ``scale=1 mean=0 std=1`` gives the pixels as they are (a model that takes 0..255)."""

    scale: float = 1 / 255
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD

    def __post_init__(self) -> None:
        values = (self.scale, *self.mean, *self.std)
        if not self.mean or not self.std or not all(math.isfinite(v) for v in values):
            raise DseError(
                f"scale={self.scale}, mean={self.mean}, std={self.std}: give finite numbers "
                "(mean and std: one value, or one per channel)"
            )
        if any(s == 0 for s in self.std):
            raise DseError(f"std={','.join(map(str, self.std))} has a 0: a std divides")

    def per_channel(self, channels: int) -> tuple[np.ndarray, np.ndarray]:
        """``mean`` and ``std`` as float32 arrays of ``channels`` values; one line if either has
        another number of values (one value is every channel's)."""
        out = []
        for key, values in (("mean", self.mean), ("std", self.std)):
            if len(values) not in (1, channels):
                shown = ",".join(map(str, values))
                raise DseError(
                    f"{key}={shown} has {len(values)} values for a model input of {channels} "
                    f"channel{'s' * (channels > 1)}: give {key}= one value or {channels}"
                )
            out.append(np.broadcast_to(np.asarray(values, np.float32), (channels,)))
        return out[0], out[1]


@dataclass(frozen=True)
class Layout:
    """Where an image input's channels are: ``channels_first`` (NCHW) or last (NHWC)."""

    channels: int
    height: int
    width: int
    channels_first: bool


def image_layout(port: Port) -> Layout | None:
    """The layout of an image input: a shape ``(1, C, H, W)`` or ``(1, H, W, C)`` with ``C`` 3
    or 1 (channels first when both read so); None for any other shape."""
    shape = tuple(port.shape)
    if len(shape) != 4 or shape[0] != 1 or min(shape) < 1:
        return None
    if shape[1] in (1, 3):
        return Layout(shape[1], shape[2], shape[3], True)
    if shape[3] in (1, 3):
        return Layout(shape[3], shape[1], shape[2], False)
    return None


@functools.cache
def image_suffixes() -> frozenset[str]:
    """The file suffixes Pillow opens (lower case, with the dot)."""
    from PIL import Image

    Image.init()
    return frozenset(ext for ext, fmt in Image.registered_extensions().items() if fmt in Image.OPEN)


def is_input(path: Path) -> bool:
    """Whether ``path``'s suffix is one :func:`load_input` reads (case aside)."""
    suffix = path.suffix.lower()
    return suffix in ARRAY_SUFFIXES or suffix in image_suffixes()


def load_input(
    path: Path, ports: Sequence[Port], preprocess: Preprocess | None = None
) -> dict[str, np.ndarray]:
    """The inputs of one request, by input name, read from ``path`` (a ``.npy``, a ``.npz`` or
    an image: the module's docstring) for a model whose inputs are ``ports``."""
    path = Path(path)
    label = shown(path)
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return _load_npz(path, label, ports)
    if len(ports) != 1:
        names = ", ".join(p.name for p in ports)
        raise DseError(
            f"{label}: the model takes {len(ports)} inputs ({names}): give a .npz of one array "
            "per input name"
        )
    port = ports[0]
    if suffix == ".npy":
        try:
            with open(path, "rb") as fh:
                array = _read_npy(fh, label, ".npy array")
        except OSError as exc:
            raise DseError(f"{label}: cannot read it ({exc.strerror or exc})") from None
        return {port.name: _checked(array, port, label)}
    return {port.name: _load_image(path, label, port, preprocess or Preprocess())}


def takes_images(ports: Sequence[Port], preprocess: Preprocess) -> Layout:
    """The layout of the one image input of a model whose inputs are ``ports``, with
    ``preprocess`` checked against its channels; one line if the model takes no image."""
    layout = image_layout(ports[0]) if len(ports) == 1 else None
    if layout is None:
        shapes = ", ".join(f"'{p.name}' of shape {_shape(p.shape)}" for p in ports)
        what = f"input {shapes} is" if len(ports) == 1 else f"inputs ({shapes}) are"
        raise DseError(
            f"the model's {what} not one image (1xCxHxW or 1xHxWxC, C 3 or 1): give .npy or "
            ".npz arrays"
        )
    preprocess.per_channel(layout.channels)
    return layout


def _load_image(path: Path, label: str, port: Port, preprocess: Preprocess) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        layout = takes_images([port], preprocess)
    except DseError as exc:
        raise DseError(f"{label}: {exc}") from None
    mean, std = preprocess.per_channel(layout.channels)
    try:
        with Image.open(path) as img:
            img = img.convert("RGB" if layout.channels == 3 else "L")
            img = img.resize((layout.width, layout.height), Image.Resampling.BILINEAR)
    except UnidentifiedImageError:
        raise DseError(f"{label}: not an image Pillow can read") from None
    except OSError as exc:
        if exc.errno is None:  # Pillow's own: a file it cannot decode
            raise DseError(f"{label}: a broken image ({_why(exc)})") from None
        raise DseError(f"{label}: cannot read it ({exc.strerror or exc})") from None
    except Image.DecompressionBombError as exc:
        raise DseError(f"{label}: too large an image for Pillow ({_why(exc)})") from None
    except (ValueError, SyntaxError) as exc:  # Pillow's for a file it cannot decode
        raise DseError(f"{label}: a broken image ({_why(exc)})") from None
    pixels = np.asarray(img, np.float32).reshape(layout.height, layout.width, layout.channels)
    x = (pixels * np.float32(preprocess.scale) - mean) / std
    if layout.channels_first:
        x = x.transpose(2, 0, 1)
    return _cast(np.ascontiguousarray(x[None]), port, label)


def _cast(x: np.ndarray, port: Port, label: str) -> np.ndarray:
    """``x`` (float32) as the port's dtype; an integer dtype takes the values rounded, and one
    line if they do not fit it."""
    dtype = np.dtype(port.dtype)
    if dtype.kind in "iub":
        lo, hi = (0, 1) if dtype.kind == "b" else (np.iinfo(dtype).min, np.iinfo(dtype).max)
        x = np.rint(x)
        if x.min() < lo or x.max() > hi:
            raise DseError(
                f"{label}: preprocessed pixels span {x.min():g}..{x.max():g}, outside the "
                f"{dtype.name} of input '{port.name}': for pixels as they are, scale=1 mean=0 "
                "std=1"
            )
    elif dtype.kind not in "fc":
        raise DseError(
            f"{label}: input '{port.name}' takes {dtype.name}, not an image: give a .npy"
        )
    return x.astype(dtype)


def _read_npy(fh: Any, label: str, what: str) -> np.ndarray:
    """The array of an open ``.npy`` (``what`` it is, for the line saying it is broken)."""
    from numpy.lib import format as npy

    if fh.read(len(npy.MAGIC_PREFIX)) != npy.MAGIC_PREFIX:
        raise DseError(f"{label}: not a {what} (no .npy header)")
    fh.seek(0)
    try:
        return npy.read_array(fh, allow_pickle=False)
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise DseError(
                f"{label}: holds Python objects (pickled): give a numeric array"
            ) from None
        raise DseError(f"{label}: a broken {what} ({_why(exc)})") from None
    except EOFError as exc:
        raise DseError(f"{label}: a broken {what} ({_why(exc)})") from None


def _load_npz(path: Path, label: str, ports: Sequence[Port]) -> dict[str, np.ndarray]:
    names = [p.name for p in ports]
    try:
        with zipfile.ZipFile(path) as zf:
            arrays = {n[:-4] if n.endswith(".npy") else n: n for n in zf.namelist()}
            extra = sorted(set(arrays) - set(names))
            missing = [n for n in names if n not in arrays]
            if missing or extra:
                problem = f"no array '{missing[0]}'" if missing else f"an array '{extra[0]}'"
                raise DseError(
                    f"{label}: {problem}: give one array per input of the model, by its name "
                    f"({', '.join(names)})"
                )
            out = {}
            for port in ports:
                where = f"{label}[{port.name}]"
                with zf.open(arrays[port.name]) as member:
                    array = _read_npy(io.BytesIO(member.read()), where, ".npy array")
                out[port.name] = _checked(array, port, where)
            return out
    except (zipfile.BadZipFile, EOFError) as exc:
        raise DseError(f"{label}: not a .npz archive ({_why(exc)})") from None
    except OSError as exc:
        raise DseError(f"{label}: cannot read it ({exc.strerror or exc})") from None


def _checked(array: np.ndarray, port: Port, label: str) -> np.ndarray:
    """``array`` as input ``port`` takes it: its shape (a missing leading 1 added) and dtype
    (byte order aside), or one line."""
    want = tuple(port.shape)
    dtype = np.dtype(port.dtype)
    shape_ok = array.shape == want or (array.shape == want[1:] and want[:1] == (1,))
    if not shape_ok or array.dtype.newbyteorder("=") != dtype.newbyteorder("="):
        raise DseError(
            f"{label}: {array.dtype.name} {_shape(array.shape)}, but the model's input "
            f"'{port.name}' takes {dtype.name} {_shape(want)}"
        )
    return np.ascontiguousarray(array.reshape(want), dtype)


def _shape(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape)) if shape else "a scalar"


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
