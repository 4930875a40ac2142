"""The event-driven schedule of one inference, compiled with numba, over a batch of mappings.

Per mapping, layers are visited in the graph's topological order. Every device runs its parts in
that order (a FIFO per device); a part starts when its device is free and all its inputs have
arrived; a transfer starts when its tensor is ready and both its link queues are free (a FIFO
each: one per device pair, one shared medium, or the sender's egress and the receiver's ingress
port of a switched network: :meth:`dse.platform.Platform.queues`), takes latency + bytes /
bandwidth, and holds both queues until it ends. A tensor crosses to a given device once. A split
layer needs its whole input on every part's device. Its parts are gathered (all-gather): a
device that computed a part and needs the whole output (it computes a consumer, or a part of
one) receives the other parts straight from the devices that computed them and concatenates
locally; the owner receives every other part and concatenates when it needs the whole (it
computes a consumer or holds a graph output) or must forward it to a device that computed no
part (Eq. 4.3 when the parts' devices do not read the output); no one else gets parts. Each
concatenation costs the layer's per-part overhead on its device. A channel-local layer that
follows a split layer (``follows``: Relu, pooling, BatchNormalization) runs on that layer's
parts with its shares, each part reading the part made on its device; its output is gathered
instead of the split layer's, by the same rule, to its own device as owner. Memory follows
allocate-then-free liveness per device over the same order (seed 002), as the runtime
(:mod:`dse.runtime.rank.worker`) holds tensors: an output is held from the step that makes it to its
last reader there, or to the end of the inference if the device sends it (sends complete there);
what a device receives or gathers lands in buffers allocated once and kept, as does the input
image where it enters: those are ``held`` bytes, apart from the peak.

Each device's work runs as sub-models, cut as :mod:`dse.runtime.compile.partition` cuts them (before
a step that receives, after a gather and after a send's deadline). Each costs on its device, on top
of its layers, a run (``segment_run_s``) and per byte of each tensor it takes in and gives out
(``segment_in_per_byte_s``, ``segment_out_per_byte_s``: layout conversions and copies at its edges).
Where receiving occupies the device (``receive_on_device``: the runtime's ranks copy data in with a
blocking receive), a transfer starts no earlier than the receiver is free and keeps it busy until it
is in.

The stages, one module each, all compiled (:mod:`.compiled`) and reading the inputs
(:mod:`.inputs`, ``k_in``) and one mapping's working state (:mod:`.state`, ``st``):

* :mod:`.kernel`: the batch (:func:`simulate`), each mapping (``simulate_one``), the figures
  (:class:`ScheduleResult`);
* :mod:`.parts`: which devices run which part of each layer, and their host slowdown;
* :mod:`.layer`: one layer: its parts (inputs in, work) and its output;
* :mod:`.receive`: an input crossing to a part's device, with its send deadline;
* :mod:`.gather`: the all-gather of a split layer's parts;
* :mod:`.segments`: sub-models, their costs and counts;
* :mod:`.timeline`: transfers on links, work on devices; :mod:`.costs`: what a step costs;
* :mod:`.memory`: liveness, peaks and the buffers kept for good.
"""

from __future__ import annotations

from models_analytical.schedule.costs import band_share, part_share
from models_analytical.schedule.inputs import KernelInputs, input_csr
from models_analytical.schedule.kernel import ScheduleResult, simulate

__all__ = ["KernelInputs", "ScheduleResult", "band_share", "input_csr", "part_share", "simulate"]
