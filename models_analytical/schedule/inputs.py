"""What the kernel reads besides the mappings: the graph, the platform and the coefficients as
arrays (:class:`KernelInputs`), built once per (graph, platform, coefficients) by the model."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dse.mapping.rows import producers


class KernelInputs(NamedTuple):
    """Read by field name in compiled code (a numba namedtuple). Per-type arrays are indexed
    by ``device_type[d]`` and named as the coefficient they carry
    (:class:`~models_analytical.coefficients.TypeCoefficients`); shapes use D devices, Y device
    types, L layers, E input edges, Q link queues, C measured link tables."""

    # devices
    device_type: np.ndarray  # int64 [D] each device's type: its row in per-type arrays
    host: np.ndarray  # int64 [D] index of each device's host
    entry: int  # device where the input image enters
    streamed: bool  # weights held only while their layer runs (else for the whole run)
    # layers (models_analytical.layer_costs.LayerTables)
    t_work: np.ndarray  # [Y, L] seconds to compute a whole layer (scales with its share)
    t_fixed: np.ndarray  # [Y, L] seconds per part regardless of share
    op_class: np.ndarray  # int64 [L] index into OP_CLASSES
    out_bytes: np.ndarray  # float64 [L] bytes of each layer's output
    weight_bytes: np.ndarray  # float64 [L] bytes of each layer's weights
    channels: np.ndarray  # float64 [L] output channels
    channel_block: np.ndarray  # [Y, L] a split conv's part computes whole blocks of this many
    part_fixed: np.ndarray  # [Y, L] share of the whole layer's time every part of it pays
    # the graph
    in_ptr: np.ndarray  # int64 [L+1] CSR of each layer's inputs
    in_src: np.ndarray  # int64 [E] producing layer, -1 for a graph input
    in_tensor: np.ndarray  # int64 [E] tensor id
    in_bytes: np.ndarray  # float64 [E] bytes of the tensor
    last_use: np.ndarray  # int64 [L] last layer reading each output (L-1 for graph outputs)
    out_ptr: np.ndarray  # int64 [L+1] CSR of each layer's consumer layers
    out_dst: np.ndarray  # int64 [E'] consumer layer
    out_tid: np.ndarray  # int64 [L] tensor id of each layer's output (-1: nobody reads it)
    is_output: np.ndarray  # bool [L] the layer makes a graph output
    follows: np.ndarray  # int64 [L] the split layer whose parts this layer continues, or -1
    follower: np.ndarray  # int64 [L] the layer that follows this one, or -1
    # rows (dse.mapping.rows; LayerGraph's row arrays)
    split_index: np.ndarray  # int64 [L] index among the splittable layers, -1: not splittable
    row_chain: np.ndarray  # bool [L] runs on its root's bands where the root splits by rows
    row_join: np.ndarray  # bool [L] runs on its inputs' bands where they all are on bands
    row_stride: np.ndarray  # int64 [L] output row o reads input rows from o x stride - pad,
    row_span: np.ndarray  # int64 [L] ... span rows
    row_pad: np.ndarray  # int64 [L]
    row_transposed: np.ndarray  # bool [L] a ConvTranspose: the window runs the other way
    in_rows: np.ndarray  # int64 [L] rows of the first activation input
    out_rows: np.ndarray  # int64 [L] rows of the output
    row_fixed: np.ndarray  # [Y, L] share of the whole layer's time every band of it pays
    # links
    link_latency_s: np.ndarray  # [D, D] latency of the link from a to b
    link_s_per_byte: np.ndarray  # [D, D] 1 / its bandwidth
    link_j_per_byte: np.ndarray  # [D, D] energy per byte moved (charged to both ends)
    # the queues (FIFOs) a transfer from a to b occupies from its start to its end, on the
    # sender's side and the receiver's: the same one for a device pair or a shared medium, a's
    # egress and b's ingress port between boards of a switched network (Platform.queues)
    queue_send: np.ndarray  # int64 [D, D]
    queue_recv: np.ndarray  # int64 [D, D]
    n_queues: int
    link_table: np.ndarray  # int64 [D, D] measured link table of each pair, -1: latency + bw
    table_bytes: np.ndarray  # [C, G] message sizes of each table (increasing)
    table_s: np.ndarray  # [C, G] transfer time at those sizes
    # coefficients of each device type
    power_w: np.ndarray  # [Y, op classes] W while computing
    overhead_power_w: np.ndarray  # [Y] W during per-layer overhead (and sub-model costs)
    transfer_fixed_s: np.ndarray  # [Y] a tensor crossing to a device of this type (the cut into
    transfer_per_byte_s: np.ndarray  # [Y] segments on both ends): fixed and per byte,
    transfer_per_byte_same_host_s: np.ndarray  # [Y] ... the latter between hosts or within one
    split_work_factor: np.ndarray  # [Y] work factor of a split layer's parts (side by side)
    shared_host_factor: np.ndarray  # [Y] work factor while another device of its host works
    segment_run_s: np.ndarray  # [Y] seconds per sub-model run, on the device (session call)
    segment_in_per_byte_s: np.ndarray  # [Y] seconds per byte of each tensor a sub-model takes
    segment_out_per_byte_s: np.ndarray  # [Y] in (layout conversion, copies) and gives out
    receive_on_device: np.ndarray  # bool [Y] a transfer occupies a receiving device of this
    # type: its rank copies the data in (MPI Recv) once it has finished its work before


def input_csr(
    edge_src: np.ndarray,
    edge_dst: np.ndarray,
    edge_tensor: tuple[str, ...],
    edge_bytes: np.ndarray,
    n_layers: int,
) -> tuple[np.ndarray, ...]:
    """Per-layer input lists (CSR, :func:`dse.mapping.rows.producers`) with integer tensor
    ids and the tensors' bytes."""
    ptr, src, order = producers(edge_src, edge_dst, n_layers)
    ids: dict[str, int] = {}
    tensor = np.array([ids.setdefault(edge_tensor[i], len(ids)) for i in order], dtype=np.int64)
    return ptr, src, tensor, edge_bytes[order].astype(np.float64)
