"""A served model's inputs from files (dse.serve.images): images preprocessed as worked out by
hand and as an independent implementation does, arrays checked against the model's input, and
one line naming the file for each way a file cannot be used."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dse.errors import DseError
from dse.serve import Port
from dse.serve.images import Preprocess, is_input, load_input
from tests.helpers.trained import as_input, photos

X = Port("x", (1, 3, 224, 224), np.dtype(np.float32))

#: A 2x2 RGB image: red, green / blue, white.
TINY = np.array([[[255, 0, 0], [0, 255, 0]], [[0, 0, 255], [255, 255, 255]]], np.uint8)
# ImageNet's preprocessing of a 0 and a 255 pixel, by hand: (p / 255 - mean) / std per channel
R0, R1 = -0.485 / 0.229, (1 - 0.485) / 0.229  # -2.1179, 2.2489
G0, G1 = -0.456 / 0.224, (1 - 0.456) / 0.224  # -2.0357, 2.4286
B0, B1 = -0.406 / 0.225, (1 - 0.406) / 0.225  # -1.8044, 2.64
#: TINY as a 1x3x2x2 input: each channel's plane
TINY_NCHW = np.array([[[[R1, R0], [R0, R1]], [[G0, G1], [G0, G1]], [[B0, B0], [B1, B1]]]])


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory: files are named in messages as the user typed them."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def error(path: str, ports: list[Port], preprocess: Preprocess | None = None) -> str:
    with pytest.raises(DseError) as caught:
        load_input(Path(path), ports, preprocess)
    return str(caught.value)


def test_a_2x2_image_becomes_the_input_worked_out_by_hand_in_either_layout(here: Path):
    Image.fromarray(TINY).save("tiny.png")
    nchw = load_input(Path("tiny.png"), [Port("x", (1, 3, 2, 2), np.dtype(np.float32))])
    assert list(nchw) == ["x"] and nchw["x"].dtype == np.float32
    np.testing.assert_allclose(nchw["x"], TINY_NCHW, rtol=1e-6)
    nhwc = load_input(Path("tiny.png"), [Port("img", (1, 2, 2, 3), np.dtype(np.float32))])
    np.testing.assert_allclose(nhwc["img"], TINY_NCHW.transpose(0, 2, 3, 1), rtol=1e-6)
    assert nhwc["img"].flags.c_contiguous
    # float16 input: the same values, cast
    half = load_input(Path("tiny.png"), [Port("x", (1, 3, 2, 2), np.dtype(np.float16))])
    assert half["x"].dtype == np.float16
    np.testing.assert_allclose(half["x"], TINY_NCHW, rtol=1e-3)


def test_one_channel_is_the_grey_image_with_its_own_mean_and_std(here: Path):
    """Pillow's grey (L = 0.299 R + 0.587 G + 0.114 B, rounded): red 76, green 150, blue 29,
    white 255; then (p / 255 - 0.5) / 0.5."""
    Image.fromarray(TINY).save("tiny.png")
    port = Port("x", (1, 1, 2, 2), np.dtype(np.float32))
    got = load_input(Path("tiny.png"), [port], Preprocess(mean=(0.5,), std=(0.5,)))["x"]
    want = (np.array([[76, 150], [29, 255]]) / 255 - 0.5) / 0.5
    np.testing.assert_allclose(got, want[None, None], rtol=1e-6)
    assert error("tiny.png", [port]) == (
        "tiny.png: mean=0.485,0.456,0.406 has 3 values for a model input of 1 channel: give "
        "mean= one value or 1"
    )


def test_pixels_as_they_are_for_a_uint8_input_and_one_line_when_they_do_not_fit(here: Path):
    Image.fromarray(TINY).save("tiny.bmp")
    port = Port("x", (1, 2, 2, 3), np.dtype(np.uint8))
    got = load_input(Path("tiny.bmp"), [port], Preprocess(scale=1, mean=(0,), std=(1,)))["x"]
    assert got.dtype == np.uint8 and (got[0] == TINY).all()
    assert error("tiny.bmp", [port]) == (
        "tiny.bmp: preprocessed pixels span -2..3, outside the uint8 of input 'x': for pixels "
        "as they are, scale=1 mean=0 std=1"
    )


def test_an_image_is_resized_to_the_input(here: Path):
    """A uniform 3x5 image resized to 2x2 is uniform: each channel (p / 255 - mean) / std."""
    Image.fromarray(np.full((3, 5, 3), (10, 20, 30), np.uint8)).save("flat.png")
    got = load_input(Path("flat.png"), [Port("x", (1, 3, 2, 2), np.dtype(np.float32))])["x"]
    want = [(10 / 255 - 0.485) / 0.229, (20 / 255 - 0.456) / 0.224, (30 / 255 - 0.406) / 0.225]
    np.testing.assert_allclose(got, np.broadcast_to(np.array(want)[None, :, None, None], got.shape),
                               rtol=1e-6)  # fmt: skip


def test_a_photo_is_the_independent_imagenet_preprocessing(here: Path):
    """scikit-learn's photo (427x640) as tests.helpers.trained.as_input makes it, from the
    same decoded pixels (a PNG: lossless)."""
    photo = photos()["china.jpg"]
    Image.fromarray(photo).save("china.png")
    got = load_input(Path("china.png"), [X])["x"]
    want = as_input(photo, (224, 224))
    assert got.shape == want.shape == (1, 3, 224, 224)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_arrays_are_taken_as_they_are_a_missing_batch_dim_added(here: Path):
    x = np.arange(3 * 224 * 224, dtype=np.float32).reshape(1, 3, 224, 224)
    np.save("whole.npy", x)
    np.save("unbatched.npy", x[0])
    np.save("big_endian.npy", x.astype(">f4"))
    np.save("fortran.npy", np.asfortranarray(x))
    for name in ("whole", "unbatched", "big_endian", "fortran"):
        got = load_input(Path(f"{name}.npy"), [X])["x"]
        assert got.dtype == np.dtype(np.float32) and got.flags.c_contiguous, name
        assert (got == x).all(), name


def test_an_npz_gives_each_input_by_name(here: Path):
    a = Port("a", (1, 2), np.dtype(np.float32))
    b = Port("in/b", (3,), np.dtype(np.int64))
    np.savez("pair.npz", **{"a": np.array([1, 2], np.float32), "in/b": np.array([4, 5, 6])})
    got = load_input(Path("pair.npz"), [a, b])
    assert list(got) == ["a", "in/b"]
    assert got["a"].tolist() == [[1.0, 2.0]] and got["in/b"].tolist() == [4, 5, 6]
    np.savez("short.npz", a=np.array([1, 2], np.float32))
    assert error("short.npz", [a, b]) == (
        "short.npz: no array 'in/b': give one array per input of the model, by its name (a, in/b)"
    )
    np.savez("more.npz", a=np.array([1, 2], np.float32), c=np.zeros(1), **{"in/b": np.ones(3)})
    assert error("more.npz", [a, b]) == (
        "more.npz: an array 'c': give one array per input of the model, by its name (a, in/b)"
    )
    np.savez("wrong.npz", a=np.array([1, 2], np.float64), **{"in/b": np.array([4, 5, 6])})
    assert error("wrong.npz", [a, b]) == (
        "wrong.npz[a]: float64 2, but the model's input 'a' takes float32 1x2"
    )
    assert error("whole.png", [a, b]) == (
        "whole.png: the model takes 2 inputs (a, in/b): give a .npz of one array per input name"
    )


def test_each_file_it_cannot_use_is_one_line_naming_it(here: Path):
    Image.fromarray(photos()["flower.jpg"]).save("flower.jpg")
    Path("truncated.jpg").write_bytes(Path("flower.jpg").read_bytes()[:3000])
    Path("text.png").write_text("not an image\n")
    np.save("objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    Path("pickle.npy").write_bytes(pickle.dumps(np.zeros((1, 3, 224, 224), np.float32)))
    np.save("float64.npy", np.zeros((1, 3, 224, 224)))
    np.save("small.npy", np.zeros((3, 32, 32), np.float32))
    Path("cut.npy").write_bytes(Path("small.npy").read_bytes()[:500])
    Path("zip.npz").write_bytes(b"PK\x03\x04 not a zip")
    np.savez("pickled.npz", x=np.array([None, 1], dtype=object))
    expected = {
        "truncated.jpg": (
            "truncated.jpg: a broken image (image file is truncated (2 bytes not processed))"
        ),
        "text.png": "text.png: not an image Pillow can read",
        "missing.jpg": "missing.jpg: cannot read it (No such file or directory)",
        "objects.npy": "objects.npy: holds Python objects (pickled): give a numeric array",
        "pickle.npy": "pickle.npy: not a .npy array (no .npy header)",
        "float64.npy": (
            "float64.npy: float64 1x3x224x224, but the model's input 'x' takes float32 1x3x224x224"
        ),
        "small.npy": "small.npy: float32 3x32x32, but the model's input 'x' takes float32 "
        "1x3x224x224",
        "cut.npy": (
            "cut.npy: a broken .npy array (Failed to read all data for array. Expected (3, 32, "
            "32) = 3072 elements, could only read 93 elements. (file seems not fully "
            "written?))"
        ),
        "missing.npy": "missing.npy: cannot read it (No such file or directory)",
        "zip.npz": "zip.npz: not a .npz archive (File is not a zip file)",
        "pickled.npz": "pickled.npz[x]: holds Python objects (pickled): give a numeric array",
    }
    assert {name: error(name, [X]) for name in expected} == expected
    not_image = Port("tokens", (1, 16), np.dtype(np.int64))
    assert error("flower.jpg", [not_image]) == (
        "flower.jpg: the model's input 'tokens' of shape 1x16 is not one image (1xCxHxW or "
        "1xHxWxC, C 3 or 1): give .npy or .npz arrays"
    )


def test_preprocess_settings_that_cannot_work_are_one_line():
    with pytest.raises(DseError, match=r"^std=0.2,0 has a 0: a std divides$"):
        Preprocess(std=(0.2, 0))
    with pytest.raises(DseError, match="give finite numbers"):
        Preprocess(scale=float("nan"))
    assert Preprocess() == Preprocess(1 / 255, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


def test_inputs_are_images_and_arrays_by_suffix():
    names = ["a.jpg", "b.JPEG", "c.png", "d.bmp", "e.webp", "f.tif", "g.npy", "h.npz"]
    assert all(is_input(Path(n)) for n in names)
    assert not any(is_input(Path(n)) for n in ["a.txt", "b.json", "c", "d.onnx", "e.pdf"])
