"""GraphRunner: one tick as a CUDA graph (H2D copy -> kernel -> D2H copy), captured once, replayed.

Layout. All of a tick's inputs are packed into ONE pinned staging block and all its outputs come
back in ONE block, so a replay is exactly two copies and one kernel whatever the number of
arrays: each copy node has a fixed cost of a few microseconds, which at tick sizes is most of
the copy. Within a block each array starts on a 64-byte boundary (whole cache lines; 16-byte
alignment for the aligned kernel variants); a broadcast value (stride 0) takes one element.

Sizes. The copies move only the bytes of the current layout, not the capacity: for 1,000 float64
options a greeks tick moves ~50 KB in and ~80 KB out, where a capacity-sized copy would move
megabytes, and at PCIe speed bytes are latency. When the layout changes (a different n, a
different set of broadcast arguments, another kernel variant) the instantiated graph is updated
in place -- ``cuGraphExecKernelNodeSetParams`` for the kernel node (pointers, n, grid, function)
and ``cuGraphExecMemcpyNodeSetParams`` for the two copy nodes -- which costs a few driver calls,
never a recapture. A repeated layout (the common case: the same chain every tick) costs nothing.
n is kept in the kernel node's parameters, not in a device-resident buffer, because the copy
sizes must change with n anyway.

Host side of a replay: the native hot path copies the caller's arrays into staging, launches the
graph, waits, and copies the results out, in one C call with the GIL released (tg_hot_roundtrip,
driven by the op's cached plan, which owns the copy tables).
"""
from __future__ import annotations

import ctypes
import threading

from tickgpu.runtime.driver import CudaError

__all__ = ["GraphRunner", "StagingLayout", "plan_layout", "STAGING_ALIGN"]

STAGING_ALIGN = 64


def _round_up(x: int, a: int) -> int:
    return -(-x // a) * a


class StagingLayout(tuple):
    """(in_offsets, in_bytes, out_offsets, out_bytes) of one tick's packed staging blocks."""

    @property
    def in_offsets(self) -> tuple[int, ...]:
        return self[0]

    @property
    def in_bytes(self) -> int:
        return self[1]

    @property
    def out_offsets(self) -> tuple[int, ...]:
        return self[2]

    @property
    def out_bytes(self) -> int:
        return self[3]


def plan_layout(in_sizes, out_sizes) -> StagingLayout:
    """Pack arrays of the given byte sizes into two blocks, each array 64-byte aligned."""
    def pack(sizes):
        offsets, cursor = [], 0
        for s in sizes:
            offsets.append(cursor)
            cursor = _round_up(cursor + int(s), STAGING_ALIGN)
        return tuple(offsets), max(cursor, STAGING_ALIGN)

    i_off, i_bytes = pack(in_sizes)
    o_off, o_bytes = pack(out_sizes)
    return StagingLayout((i_off, i_bytes, o_off, o_bytes))


class GraphRunner:
    """Pinned staging + device buffers of fixed capacity, and the graph that moves a tick through.

    Parameters
    ----------
    driver : Driver
        The driver (or a mock).
    ctx : int
        The context owning every handle (copy-node updates name it).
    in_capacity, out_capacity : int
        Bytes of the input and output blocks (host and device each); allocated here, once.
    name : str
        For messages.

    Notes
    -----
    NOTE: one tick at a time per runner: the staging blocks, the graph and the copy lists are
    shared state. `lock` serialises callers; the pipeline uses two runners to overlap.
    """

    def __init__(self, driver, ctx: int, in_capacity: int, out_capacity: int, name: str = "graph"):
        from tickgpu._native import ffi

        self.driver, self.ctx, self.name = driver, ctx, name
        self.in_capacity = _round_up(max(in_capacity, STAGING_ALIGN), 4096)
        self.out_capacity = _round_up(max(out_capacity, STAGING_ALIGN), 4096)
        self.lock = threading.Lock()
        self.stream = driver.stream_create()
        self.in_host = driver.mem_host_alloc(self.in_capacity)
        self.out_host = driver.mem_host_alloc(self.out_capacity)
        self.in_dev = driver.mem_alloc(self.in_capacity)
        self.out_dev = driver.mem_alloc(self.out_capacity)
        self.graph = 0
        self.exec = 0
        self._kernel_node = self._h2d_node = self._d2h_node = 0
        self._kernel_key = None       # (func, grid, block, shared, argument bytes) now in the graph
        self._copy_bytes = (0, 0)     # (in bytes, out bytes) now in the graph
        self.stats = {"captures": 0, "kernel_updates": 0, "copy_updates": 0, "replays": 0}
        self.bound = None   # the plan whose layout the graph holds now (set by the plan)
        # Broadcast values are written straight into pinned staging through this view.
        self.in_view = memoryview((ctypes.c_char * self.in_capacity).from_address(self.in_host)).cast("B")
        # Copy tables are tg_hot_copy[] = {dst, src, bytes}, filled through (k, 3) uint64 arrays.
        if ffi.sizeof("tg_hot_copy") != 24:
            raise RuntimeError("tg_hot_copy is not {void*, void*, size_t} of 8 bytes each on this platform")

    # ---- graph -----------------------------------------------------------------------------
    def prepare(self, launcher, n: int, layout: StagingLayout) -> None:
        """Make the graph run `launcher`'s kernel (its packed arguments) over `n` with `layout`.

        Captures on first use; afterwards updates only the nodes whose parameters changed.
        """
        if layout.in_bytes > self.in_capacity or layout.out_bytes > self.out_capacity:
            raise ValueError(f"{self.name}: a tick of {layout.in_bytes} B in / {layout.out_bytes} B out exceeds "
                             f"the staging capacity {self.in_capacity} / {self.out_capacity} B")
        spec = launcher.kernel.spec
        grid = launcher.grid(n)
        key = (launcher.kernel.func, grid, spec.block, spec.shared, launcher.args.snapshot())
        if not self.exec:
            self._capture(launcher, grid, layout)
            self._kernel_key, self._copy_bytes = key, (layout.in_bytes, layout.out_bytes)
            return
        try:
            self._update(launcher, grid, layout, key)
        except CudaError as e:
            # An update the driver refuses (a node kind it cannot update in place on this
            # driver) costs a recapture, once per layout change, instead of failing the call.
            self.stats["update_refusals"] = self.stats.get("update_refusals", 0) + 1
            self.last_update_error = str(e)
            self._drop_graph()
            self._capture(launcher, grid, layout)
            self._kernel_key, self._copy_bytes = key, (layout.in_bytes, layout.out_bytes)

    def _update(self, launcher, grid, layout: StagingLayout, key) -> None:
        spec = launcher.kernel.spec
        if key != self._kernel_key:
            self.driver.graph_exec_kernel_node_set_params(self.exec, self._kernel_node, launcher.kernel.func, grid,
                                                          spec.block, spec.shared, launcher.args.address,
                                                          kernel=spec.variant)
            self._kernel_key = key
            self.stats["kernel_updates"] += 1
        if layout.in_bytes != self._copy_bytes[0]:
            self.driver.graph_exec_memcpy_node_set_params(self.exec, self._h2d_node, self.ctx, self.in_dev,
                                                          self.in_host, layout.in_bytes)
            self.stats["copy_updates"] += 1
        if layout.out_bytes != self._copy_bytes[1]:
            self.driver.graph_exec_memcpy_node_set_params(self.exec, self._d2h_node, self.ctx, self.out_host,
                                                          self.out_dev, layout.out_bytes)
            self.stats["copy_updates"] += 1
        self._copy_bytes = (layout.in_bytes, layout.out_bytes)

    def _drop_graph(self) -> None:
        self.driver.stream_synchronize(self.stream)
        if self.exec:
            self.driver.graph_exec_destroy(self.exec)
        if self.graph:
            self.driver.graph_destroy(self.graph)
        self.exec = self.graph = 0
        self._kernel_node = self._h2d_node = self._d2h_node = 0

    def _capture(self, launcher, grid, layout: StagingLayout) -> None:
        d, s, spec = self.driver, self.stream, launcher.kernel.spec
        d.stream_begin_capture(s)
        try:
            d.memcpy_htod_async(self.in_dev, self.in_host, layout.in_bytes, s)
            d.launch(launcher.kernel.func, grid, spec.block, spec.shared, s, launcher.args.address,
                     kernel=spec.variant)
            d.memcpy_dtoh_async(self.out_host, self.out_dev, layout.out_bytes, s)
        finally:
            graph = d.stream_end_capture(s)   # always end, so a failed capture leaves the stream usable
        self.graph = graph
        self.exec = d.graph_instantiate(graph)
        for node, kind in d.graph_nodes(graph):
            if kind == "kernel":
                self._kernel_node = node
            elif kind == "memcpy":
                dst, _ = d.graph_memcpy_node_addresses(node)
                if dst == self.in_dev:
                    self._h2d_node = node
                elif dst == self.out_host:
                    self._d2h_node = node
        if not (self._kernel_node and self._h2d_node and self._d2h_node):
            raise RuntimeError(f"{self.name}: captured graph lacks the copy -> kernel -> copy nodes")
        self.stats["captures"] += 1

    # ---- ticks (the copy tables are filled by the caller's plan) ---------------------------
    def replay(self) -> None:
        """Launch the graph as it stands and wait (warm-up)."""
        self.driver.graph_launch(self.exec, self.stream, sync=True)
        self.stats["replays"] += 1

    def close(self) -> None:
        """Free everything (not needed at exit: the driver frees a process's memory)."""
        d = self.driver
        self._drop_graph()
        for p in (self.in_dev, self.out_dev):
            d.mem_free(p)
        for p in (self.in_host, self.out_host):
            d.mem_free_host(p)
        d.stream_destroy(self.stream)
