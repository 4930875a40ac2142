"""The receptive-field arithmetic of a row window (:class:`dse.net.ops.RowWindow`), compiled: the
input rows a band of output rows reads. Its one home: the op registry's windows, the mapping's
row layout (:mod:`dse.mapping.rows`) and the model's kernel all call :func:`needed`."""

from __future__ import annotations

from numba import njit


@njit(cache=True, nogil=True)
def needed(o0, o1, stride, span, pad, in_rows, transposed=False):
    """The input rows ``(lo, hi)`` output rows ``[o0, o1)`` read, clipped; (0, 0) when empty.

    ``transposed`` (a ConvTranspose): input row i reaches output rows ``i x stride - pad`` to
    ``i x stride - pad + span`` (exclusive), so output row o reads the input rows from
    ``ceil((o + pad - span + 1) / stride)`` to ``floor((o + pad) / stride)``. A band past
    every input row's reach (in ``output_padding``) reads the last row, so no band reads
    none."""
    if o1 <= o0:
        return 0, 0
    if transposed:
        lo = max(0, -((span - 1 - o0 - pad) // stride))  # ceil((o0 + pad - span + 1) / stride)
        hi = min(in_rows, (o1 - 1 + pad) // stride + 1)
        lo = min(lo, in_rows - 1)
        return lo, max(lo + 1, hi)
    lo = max(0, o0 * stride - pad)
    hi = min(in_rows, (o1 - 1) * stride - pad + span)
    return lo, max(lo, hi)
