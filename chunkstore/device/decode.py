"""The device-side decoder: a batch of records becomes a batch of items in a fixed number of torch ops.

Everything whose size depends on the data (how many runs, how many value bytes)
is counted on the host from its own tables and passed in as Python ints, so no
op reads device data back (``repeat_interleave`` gets its ``output_size``). The
ops are the same for 1 item or 10,000: only tensor lengths change. They run on any
torch device (cpu, cuda, mps, meta).

Inputs per batch of ``n`` items (see :class:`chunkstore.device.runs.RunFormat` for
a record), an int64 ``(5, n)`` header:

====  =====================================================================
row   per item ``k``
====  =====================================================================
0     reference row of ``k`` in the reference pool (0 = the zero item)
1     ``nw``: its number of runs (words)
2     address of its first word (in words) minus the global index of that run
3     ``k * item_nbytes`` minus the global index of its first value byte
4     address of its first value byte minus that same global index
====  =====================================================================

"Global index" numbers the runs (values) of the whole batch in item order, so a
run's (value byte's) address is its item's base plus its own global index: one
``index_select`` of the per-item bases and one add, no per-item loop.
"""

from __future__ import annotations

from typing import Any

from chunkstore.device.runs import RunFormat

__all__ = ["HEADER_ROWS", "decode"]

#: rows of the per-item header (see the module docstring)
HEADER_ROWS = 5


def decode(torch: Any, fmt: RunFormat, refs: Any, words: Any, heap: Any, header: Any,
           n_runs: int, n_values: int) -> Any:
    """Decode a batch: a copy of ``refs`` rows with every run of every record written in.

    Parameters
    ----------
    torch
        The torch module (imported by the caller).
    fmt
        The records' run format.
    refs
        The reference pool: a tensor ``(R, ...)`` whose rows are items (any dtype
        whose bytes are the item's bytes); the result has its dtype and row shape.
    words, heap
        The same device bytes viewed as run words (int16 or int32) and as uint8.
    header
        int64 ``(5, n)`` on the device (the module docstring).
    n_runs, n_values
        Total runs and value bytes of the batch, counted on the host.

    Returns
    -------
    Tensor ``(n, ...)`` like ``refs`` rows.
    """
    dev = heap.device
    # unbind and one slice rather than an indexing op per row: views cost a dispatch each too
    ref, nw, *_ = header.unbind(0)
    bases = header[2:]
    out = refs.index_select(0, ref)
    flat = out if out.dtype == torch.uint8 else out.view(torch.uint8)
    run_item = torch.repeat_interleave(nw, output_size=n_runs)
    per_run = bases.index_select(1, run_item)  # (3, runs): word, destination and source bases
    word_base, dest_base, _ = per_run.unbind(0)
    word = words.index_select(0, word_base.add_(torch.arange(n_runs, device=dev))).long()
    length = (word >> fmt.pos_bits).bitwise_and_((1 << fmt.len_bits) - 1).add_(1)
    dest_base.add_(word.bitwise_and_((1 << fmt.pos_bits) - 1))  # + the run's skip
    value_run = torch.repeat_interleave(length, output_size=n_values)
    per_value = per_run[1:].index_select(1, value_run).add_(torch.arange(n_values, device=dev))
    dest, src = per_value.unbind(0)
    flat.put_(dest, heap.index_select(0, src))
    return out
