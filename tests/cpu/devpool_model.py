"""What the two DevicePool state machines share (test_devpool.py on the host backend,
devpool_vmm_cases.py on the stand-in libcuda): buffer contents, and the free rules.

A model holds live {ptr: (nbytes, rounded, level, tag)} and pending {ptr: (rounded, level)}, and
says in ``_flushed`` what a flush of the pending frees does to it.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from tickgpu.memory import PoolError


def fill(ptr: int, nbytes: int, tag: int) -> None:
    ctypes.memset(ptr, tag, nbytes)


def intact(ptr: int, nbytes: int, tag: int) -> bool:
    if nbytes == 0:
        return True
    a = np.frombuffer((ctypes.c_uint8 * nbytes).from_address(ptr), dtype=np.uint8)
    return bool((a == tag).all())


class FreeRules(RuleBasedStateMachine):
    """Frees, double frees, foreign frees and flushes against a model's live and pending buffers
    (a subclass sets ``pool``, ``live``, ``pending`` and ``lazy_bytes``)."""

    def _flushed(self):
        self.pending.clear()

    # Buffers are picked by position in allocation order, never by address: addresses differ from
    # run to run, and hypothesis must be able to replay a drawn choice.
    @precondition(lambda self: self.live)
    @rule(pick=st.integers(0, 1 << 16))
    def free(self, pick):
        ptr = list(self.live)[pick % len(self.live)]
        nbytes, rounded, level, tag = self.live.pop(ptr)
        assert intact(ptr, nbytes, tag), f"buffer {hex(ptr)} was overwritten while live"
        self.pool.free(ptr)
        self.pending[ptr] = (rounded, level)
        if sum(r for r, _ in self.pending.values()) > self.lazy_bytes:
            self._flushed()

    @precondition(lambda self: self.pending)
    @rule(pick=st.integers(0, 1 << 16))
    def double_free(self, pick):
        ptr = list(self.pending)[pick % len(self.pending)]
        with pytest.raises(PoolError, match=f"0x{ptr:x}.*double free"):
            self.pool.free(ptr)

    @rule(offset=st.integers(1, 511))
    def foreign_free(self, offset):
        ptr = (next(iter(self.live)) if self.live else 1 << 40) + offset
        with pytest.raises(PoolError, match=f"0x{ptr:x}"):
            self.pool.free(ptr)

    @rule()
    def flush(self):
        self.pool.flush()
        self._flushed()
