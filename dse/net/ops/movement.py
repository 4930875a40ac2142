"""Data movement: free, but some must keep their input's elements."""

from __future__ import annotations

from dse.errors import DseError
from dse.net.ops import LayerLike, OpView, RowWindow, family_of, numel, register


@register("Identity", "Dropout", family=family_of("movement"), local="any", fused=True)
@register(
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Transpose",
    "Cast",
    family=family_of("movement"),
)
def _same_elements(v: OpView) -> int:
    # free, but the output holds exactly the input's elements: a Reshape of 48 values to
    # [5, 7] is a broken model, not 35 values
    x = v.in_shapes[0] if v.in_shapes else None
    if x is not None and v.out_shapes and numel(x) != numel(v.out_shapes[0]):
        raise DseError(
            f"inconsistent model: a {v.op} of shape {list(x)} ({numel(x)} values) gives shape "
            f"{list(v.out_shapes[0])} ({numel(v.out_shapes[0])} values)"
        )
    return 0


def concat_rows(layer: LayerLike) -> RowWindow | None:
    """A Concat along the channels of NCHW tensors reads the same rows of every input."""
    axis = int(layer.attrs.get("axis", 0))
    if len(getattr(layer, "output_shape", ())) != 4 or axis not in (1, -3):
        return None
    return RowWindow(1, 1, 0)


@register("Concat", family=family_of("concat"), rows=concat_rows)
@register("Pad", family=family_of("movement"), not_parameters=frozenset({1, 2, 3}))
@register(
    "Slice",
    "Split",
    "Gather",
    "GatherElements",
    "GatherND",
    "CastLike",
    "Expand",
    "Tile",
    "Shape",
    "Size",
    "Constant",
    "ConstantOfShape",
    "Range",
    "DepthToSpace",
    "SpaceToDepth",
    "ScatterND",
    "ScatterElements",
    "Compress",
    "OneHot",
    "EyeLike",
    "Trilu",
    "ReverseSequence",
    "SequenceAt",
    "SplitToSequence",
    "ConcatFromSequence",
    family=family_of("movement"),
)
def _free(v: OpView) -> int:
    return 0
