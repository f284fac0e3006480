"""Graph runners: pinned staging, a stream, and the CUDA graphs that move a tick through them.

A tick is one graph: H2D copy -> kernel -> D2H copy. All of a tick's inputs are packed into ONE
pinned staging block and all its outputs come back in ONE block, so a replay is exactly two
copies and one kernel whatever the number of arrays: each copy node has a fixed cost of a few
microseconds, which at tick sizes is most of the copy. Within a block each array starts on a
64-byte boundary (whole cache lines; 16-byte alignment for the aligned kernel variants).

Graphs. A runner (staging + stream) holds any number of instantiated graphs over its staging
(`TickGraph`). The staged path gives every tick size bucket its own graph, captured once (by
warm-up) and never changed afterwards except for the kernel's element strides (which inputs are
broadcast values): so a chain that hops between sizes replays without a single driver update,
and the first call after warm-up costs what the thousandth does. Runners whose layouts vary
without bound (a surface's grid, a pipeline's last chunk) share one graph per runner and
re-point it with ``cuGraphExecKernelNodeSetParams`` / ``cuGraphExecMemcpyNodeSetParams`` when the
layout changes (a few driver calls, never a recapture; a refused update costs one recapture).

Sizes. Copy nodes move only the bytes of the graph's layout, not the runner's capacity: at PCIe
speed bytes are latency.
"""
from __future__ import annotations

import ctypes
import threading

from tickgpu.runtime.driver import CudaError

__all__ = ["GraphRunner", "TickGraph", "StagingLayout", "plan_layout", "STAGING_ALIGN", "DriverMemory"]

STAGING_ALIGN = 64


def _round_up(x: int, a: int) -> int:
    return -(-x // a) * a


class DriverMemory:
    """Long-lived buffers straight from the driver: pinned (portable, mapped) host memory and
    device memory. ``host``/``device`` return (address, token); the token frees it.

    The runtime's contexts use a `tickgpu.runtime.device.BufferSource` instead (pools); this is
    what a runner made without one uses.
    """

    def __init__(self, driver):
        self.driver = driver

    def host(self, nbytes: int) -> tuple[int, int]:
        p = self.driver.mem_host_alloc(nbytes)
        return p, p

    def free_host(self, token: int) -> None:
        self.driver.mem_free_host(token)

    def device(self, nbytes: int) -> tuple[int, int]:
        p = self.driver.mem_alloc(nbytes)
        return p, p

    def free_device(self, token: int) -> None:
        self.driver.mem_free(token)


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


class TickGraph:
    """One instantiated graph (H2D copy -> kernel -> D2H copy) over a runner's staging.

    `hold` makes it run a launcher's kernel (with the values packed in its argument buffer) over
    a layout, updating only the nodes whose parameters differ; ``holder`` is a tag the caller
    sets to recognise what the graph holds without comparing bytes.

    ``mapped``: the graph is the kernel alone, reading and writing the pinned staging through its
    device mapping (zero copy): no copy node's fixed cost, which at tick sizes is most of a copy
    (DESIGN.md: 10 us round trip against 18 us for copy -> kernel -> copy at 1,024 floats). The
    kernel's pointers must then be the runner's mapped addresses (``in_mapped``, ``out_mapped``).
    """

    def __init__(self, runner: "GraphRunner", mapped: bool = False):
        self.runner = runner
        self.mapped = mapped
        self.graph = 0
        self.exec = 0
        self._kernel_node = self._h2d_node = self._d2h_node = 0
        self._kernel_key = None       # (func, grid, block, shared, argument bytes) now in the graph
        self._copy_bytes = (0, 0)     # (in bytes, out bytes) now in the graph
        self.holder = None

    def hold(self, launcher, n: int, layout: StagingLayout) -> None:
        """Make the graph run `launcher`'s kernel (its packed arguments) over `n` with `layout`.

        Captures on first use; afterwards updates only the nodes whose parameters changed.
        """
        r = self.runner
        if layout.in_bytes > r.in_capacity or layout.out_bytes > r.out_capacity:
            raise ValueError(f"{r.name}: a tick of {layout.in_bytes} B in / {layout.out_bytes} B out exceeds "
                             f"the staging capacity {r.in_capacity} / {r.out_capacity} B")
        spec = launcher.kernel.spec
        grid = launcher.grid(n)
        key = (launcher.kernel.func, grid, spec.block, spec.shared, launcher.args.snapshot())
        if not self.exec:
            self._capture(launcher, grid, layout)
        else:
            try:
                self._update(launcher, grid, layout, key)
            except CudaError as e:
                # An update the driver refuses (a node kind it cannot update in place on this
                # driver) costs a recapture, once per layout change, instead of failing the call.
                r.stats["update_refusals"] = r.stats.get("update_refusals", 0) + 1
                r.last_update_error = str(e)
                self.destroy()
                self._capture(launcher, grid, layout)
        self._kernel_key, self._copy_bytes = key, (layout.in_bytes, layout.out_bytes)

    def _update(self, launcher, grid, layout: StagingLayout, key) -> None:
        r, d, spec = self.runner, self.runner.driver, launcher.kernel.spec
        if key != self._kernel_key:
            d.graph_exec_kernel_node_set_params(self.exec, self._kernel_node, launcher.kernel.func, grid,
                                                spec.block, spec.shared, launcher.args.address,
                                                kernel=spec.variant)
            self._kernel_key = key
            r.stats["kernel_updates"] += 1
        if self.mapped:
            return
        if layout.in_bytes != self._copy_bytes[0]:
            d.graph_exec_memcpy_node_set_params(self.exec, self._h2d_node, r.ctx, r.in_dev, r.in_host,
                                                layout.in_bytes)
            r.stats["copy_updates"] += 1
        if layout.out_bytes != self._copy_bytes[1]:
            d.graph_exec_memcpy_node_set_params(self.exec, self._d2h_node, r.ctx, r.out_host, r.out_dev,
                                                layout.out_bytes)
            r.stats["copy_updates"] += 1
        self._copy_bytes = (layout.in_bytes, layout.out_bytes)

    def _capture(self, launcher, grid, layout: StagingLayout) -> None:
        r = self.runner
        d, s, spec = r.driver, r.stream, launcher.kernel.spec
        d.stream_begin_capture(s)
        try:
            if not self.mapped:
                d.memcpy_htod_async(r.in_dev, r.in_host, layout.in_bytes, s)
            d.launch(launcher.kernel.func, grid, spec.block, spec.shared, s, launcher.args.address,
                     kernel=spec.variant)
            if not self.mapped:
                d.memcpy_dtoh_async(r.out_host, r.out_dev, layout.out_bytes, s)
        finally:
            graph = d.stream_end_capture(s)   # always end, so a failed capture leaves the stream usable
        self.graph = graph
        self.exec = d.graph_instantiate(graph)
        for node, kind in d.graph_nodes(graph):
            if kind == "kernel":
                self._kernel_node = node
            elif kind == "memcpy":
                dst, _ = d.graph_memcpy_node_addresses(node)
                if dst == r.in_dev:
                    self._h2d_node = node
                elif dst == r.out_host:
                    self._d2h_node = node
        if not (self._kernel_node and (self.mapped or (self._h2d_node and self._d2h_node))):
            raise RuntimeError(f"{r.name}: captured graph lacks the copy -> kernel -> copy nodes")
        r.stats["captures"] += 1

    def destroy(self) -> None:
        d = self.runner.driver
        if self.exec or self.graph:
            d.stream_synchronize(self.runner.stream)
        if self.exec:
            d.graph_exec_destroy(self.exec)
        if self.graph:
            d.graph_destroy(self.graph)
        self.exec = self.graph = 0
        self._kernel_node = self._h2d_node = self._d2h_node = 0
        self._kernel_key, self._copy_bytes, self.holder = None, (0, 0), None


class GraphRunner:
    """Pinned staging + device buffers of fixed capacity, a stream, and graphs over them.

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
    NOTE: one tick at a time per runner: the staging blocks are shared by all its graphs. The
    runtime serialises calls (the context's lock); the pipeline overlaps through several runners.
    """

    def __init__(self, driver, ctx: int, in_capacity: int, out_capacity: int, name: str = "graph", memory=None):
        from tickgpu._native import ffi

        self.driver, self.ctx, self.name = driver, ctx, name
        self.in_capacity = _round_up(max(in_capacity, STAGING_ALIGN), 4096)
        self.out_capacity = _round_up(max(out_capacity, STAGING_ALIGN), 4096)
        self.lock = threading.Lock()
        self.stream = driver.stream_create()
        # `memory` (the context's BufferSource): staging from the pinned pool, device blocks from
        # the device pool; without one, straight from the driver.
        self.memory = memory if memory is not None else DriverMemory(driver)
        self.in_host, self._in_host = self.memory.host(self.in_capacity)
        self.out_host, self._out_host = self.memory.host(self.out_capacity)
        self.in_dev, self._in_dev = self.memory.device(self.in_capacity)
        self.out_dev, self._out_dev = self.memory.device(self.out_capacity)
        # The staging blocks as the device sees them (pinned with DEVICEMAP: zero-copy graphs).
        self.in_mapped = driver.host_device_pointer(self.in_host)
        self.out_mapped = driver.host_device_pointer(self.out_host)
        self.graphs: list[TickGraph] = []
        self.shared = TickGraph(self)   # the re-pointed graph (see the module docstring)
        self.graphs.append(self.shared)
        self.stats = {"captures": 0, "kernel_updates": 0, "copy_updates": 0, "replays": 0}
        self.staged_by = None   # the plan whose inputs the input staging holds (its single values)
        # Broadcast values are written straight into pinned staging through this view.
        self.in_view = memoryview((ctypes.c_char * self.in_capacity).from_address(self.in_host)).cast("B")
        if ffi.sizeof("tg_hot_copy") != 24:
            raise RuntimeError("tg_hot_copy is not {void*, void*, size_t} of 8 bytes each on this platform")

    def new_graph(self, mapped: bool = False) -> TickGraph:
        """A graph of this runner's own (captured by its first `TickGraph.hold`)."""
        g = TickGraph(self, mapped)
        self.graphs.append(g)
        return g

    # ---- the shared graph (kept for callers that re-point one graph) ---------------------------
    @property
    def exec(self) -> int:
        return self.shared.exec

    @property
    def bound(self):
        return self.shared.holder

    def prepare(self, launcher, n: int, layout: StagingLayout) -> None:
        """Point the shared graph at `launcher`'s kernel over `n` with `layout` (captured on first use)."""
        self.shared.hold(launcher, n, layout)

    def replay(self, graph: TickGraph | None = None) -> None:
        """Launch a graph as it stands and wait (warm-up)."""
        g = graph or self.shared
        self.staged_by = None
        self.driver.graph_launch(g.exec, self.stream, sync=True)
        self.stats["replays"] += 1

    def close(self) -> None:
        """Free everything (not needed at exit: the driver frees a process's memory)."""
        d = self.driver
        for g in self.graphs:
            g.destroy()
        self.graphs = []
        for t in (self._in_dev, self._out_dev):
            self.memory.free_device(t)
        for t in (self._in_host, self._out_host):
            self.memory.free_host(t)
        d.stream_destroy(self.stream)
