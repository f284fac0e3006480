"""The float64 greeks kernel's erfcx table (tickgpu.kernels.erfcx): its data is what its documented
fit gives, the table's polynomials and the NumPy mirror of the kernel's steps are within an ulp or
two of erfcx (mpmath at 30 digits), every interval is reached by the index the kernel computes, and
the inline PTX assembles (Triton's ptxas) and holds the table in the order the kernel reads it.

The kernel's own results (with the FMAs) are checked against the CPU backend on the GPU
(tests/gpu) and under the Triton interpreter through the NumPy mirror (test_interpreter.py).
"""
import re
import subprocess

import numpy as np
import pytest

from tickgpu.kernels import erfcx

mp = pytest.importorskip("mpmath")


def _erfcx_mp(x) -> np.ndarray:
    with mp.workdps(30):
        return np.array([float(mp.erfc(mp.mpf(v)) * mp.exp(mp.mpf(v) ** 2)) for v in np.ravel(x)])


def test_committed_table_is_the_fit():
    fresh, worst = erfcx.fit(check=True)
    np.testing.assert_array_equal(erfcx.table(), np.array(fresh))
    assert worst < 1.5e-16, worst


def test_intervals_cover_zero_to_thirty_and_the_index_finds_each():
    lo = np.array([a for a, _ in erfcx.INTERVALS])
    hi = np.array([b for _, b in erfcx.INTERVALS])
    assert lo[0] == 0.0 and hi[-1] == 30.0 and np.all(lo[1:] == hi[:-1])
    t = erfcx.table()
    for i, (a, b) in enumerate(erfcx.INTERVALS):
        assert np.all(erfcx._index(np.array([a, (a + b) / 2, b - (b - a) * 1e-9])) == i), (i, a, b)
        # Within a rounding of x + 2 below an interval's end the index may already be the next
        # interval's: its local variable is then -1 less a few ulps, where its polynomial holds.
        x = np.nextafter(b, 0.0)
        j = erfcx._index(np.array([x]))[0]
        assert j in (i, i + 1) and abs(x * t[0, j] + t[1, j]) <= 1 + 1e-15, (i, j)
    # The table's scale and offset map each interval onto [-1, 1].
    np.testing.assert_array_equal(lo * t[0] + t[1], -1.0)
    np.testing.assert_array_equal(hi * t[0] + t[1], 1.0)


def test_evaluation_is_within_an_ulp_or_two(rng):
    edges = np.array([a for a, _ in erfcx.INTERVALS] + [30.0 - 2.0**-48])
    x = np.concatenate([rng.uniform(0, 30, 3000), rng.uniform(0, 2, 1000), np.exp(rng.uniform(-40, 0, 500)),
                        edges, np.nextafter(edges[1:], 0), [0.0, 5e-324, 27.3]])
    rel = np.abs(erfcx.evaluate(x) / _erfcx_mp(x) - 1)
    assert rel.max() <= 3e-16, (rel.max(), x[rel.argmax()])


def test_out_of_range_arguments_are_clamped_to_finite_values():
    got = erfcx.evaluate(np.array([np.nan, -1.0, -0.0, 30.0, 1e300, np.inf]))
    assert np.all(np.isfinite(got))
    np.testing.assert_array_equal(got[:3], erfcx.evaluate(0.0))
    np.testing.assert_array_equal(got[3:], erfcx.evaluate(erfcx.XMAX))


@pytest.mark.parametrize("args", [1, 2])
def test_ptx_holds_the_table_coefficient_major(args):
    text = erfcx.ptx(args)
    assert text.count(".global .align") == 1   # one table, however many arguments
    words = re.search(r"tg_erfcx_tab\[(\d+)\] = \{([^}]*)\}", text)
    assert int(words.group(1)) == erfcx.table().size == (erfcx.DEGREE + 3) * len(erfcx.INTERVALS)
    vals = np.array([int(w.strip()[2:], 16) for w in words.group(2).split(",")], dtype=np.uint64).view(np.float64)
    np.testing.assert_array_equal(vals.reshape(erfcx.DEGREE + 3, len(erfcx.INTERVALS)), erfcx.table())
    for k in range(args):
        # Argument k+args into output k; 17 loads, one row (128 bytes) apart, and 15 FMAs (the
        # local variable and the Horner steps).
        assert f"max.f64 tg_x{k}, ${args + k}," in text and f"mov.f64 ${k}, tg_p{k};" in text
        offsets = [int(m or 0) for m in re.findall(rf"ld\.global\.nc\.f64 tg_\w{k}, \[tg_a{k}(?:\+(\d+))?\]", text)]
        assert offsets == [128 * j for j in range(erfcx.DEGREE + 3)]
        assert len(re.findall(rf"fma\.rn\.f64 tg_\w{k},", text)) == erfcx.DEGREE + 1
        # The interval's byte offset: (bits of x + 2) >> 47 & 120, which is 8 * _index.
        assert f"shr.u64 tg_i{k}, tg_i{k}, 47;" in text and f"and.b64 tg_i{k}, tg_i{k}, 120;" in text
    x = np.linspace(0.0, erfcx.XMAX, 10001)
    bits = (x + 2.0).view(np.uint64)
    np.testing.assert_array_equal(((bits >> np.uint64(47)) & np.uint64(120)) // np.uint64(8), erfcx._index(x))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptx_assembles(tmp_path, arch):
    triton = pytest.importorskip("triton", reason="Triton's ptxas assembles the PTX")
    ptxas = triton.knobs.nvidia.ptxas.path
    body = erfcx.ptx(2)
    for op, reg in (("$0", "%fd3"), ("$1", "%fd4"), ("$2", "%fd1"), ("$3", "%fd2")):
        body = body.replace(op, reg)
    src = "\n".join([
        ".version 8.0", f".target {arch}", ".address_size 64",
        ".visible .entry k(.param .u64 p)", "{", ".reg .b64 %rd<2>;", ".reg .f64 %fd<5>;",
        "ld.param.u64 %rd1, [p];", "ld.global.f64 %fd1, [%rd1];", "ld.global.f64 %fd2, [%rd1+8];", body,
        "st.global.f64 [%rd1], %fd3;", "st.global.f64 [%rd1+8], %fd4;", "ret;", "}", ""])
    (tmp_path / "k.ptx").write_text(src)
    run = subprocess.run([ptxas, f"-arch={arch}", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
