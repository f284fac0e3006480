"""The quant benchmark's cases end to end on the mock driver and PyTorch on the CPU (no GPU).

Not a measurement: it runs every implementation of a GEMM case and a model case once through the
same code the GPU run uses, so a mis-wired launch (wrong argument, stride, variant) shows up here as
an error or a nonzero difference from the NumPy reference before any GPU time is spent.
"""
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tickgpu.runtime as rt  # noqa: E402
from tickgpu import dispatch  # noqa: E402
from tickgpu.bench import quant as bq  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from cuda_mock import MockDriver, default_entries, quant_entries, write_bundle  # noqa: E402


class _Event:
    """torch.cuda.Event's timing interface on the host clock (the mock runs kernels synchronously)."""

    def __init__(self, enable_timing=True):
        self.t = None

    def record(self, stream=None):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3


class _TorchOnCpu:
    """torch, with CUDA events replaced by host-clock ones."""

    cuda = types.SimpleNamespace(Event=_Event)

    def __getattr__(self, name):
        return getattr(torch, name)


@pytest.fixture
def kr(tmp_path, monkeypatch):
    entries = default_entries() + quant_entries("sm_90")
    # Two SMs: a 70 x 130 layer fills them with the wider tiles, so the cases run those too.
    rt.init(driver=MockDriver(sm_count=2), bundle_dir=write_bundle(tmp_path / "b", entries), staging_elements=64)
    monkeypatch.setattr(dispatch, "gpu_available", lambda: True)
    yield rt.kernel_runtime()
    rt.reset()


@pytest.mark.parametrize("m,n,k", [(1, 64, 48), (17, 40, 64), (70, 130, 96)])
def test_gemm_case_runs_every_implementation(kr, m, n, k):
    r = bq.gemm_case(_TorchOnCpu(), kr, None, np.random.default_rng(0), m, n, k, quick=True, device="cpu")
    assert set(r["cases"]) == {"tickgpu_w8a8_gemm", "tickgpu_w8a8_layer", "tickgpu_w16a8_gemm",
                               "tickgpu_w16a8_layer", "tickgpu_w16a16_gemm", "tickgpu_w16a16_layer",
                               "tickgpu_w8a16_gemm", "torch_fp16_matmul",
                               "torch_bf16_matmul", "torch_int_mm_dequant", "torch_int8_layer"}
    for name, c in r["cases"].items():
        if name.startswith("tickgpu"):
            assert "error" not in c, (name, c)
            assert c["tops"] > 0 and c["p50_us"] > 0
    for name in ("tickgpu_w8a8_gemm", "tickgpu_w16a8_gemm", "tickgpu_w16a16_gemm", "tickgpu_w8a16_gemm"):
        assert r["cases"][name]["max_abs_err"] == 0.0, name   # the mock computes the reference itself
    assert r["tiles"] == ({"w8a8": "w", "w16a8": "l", "w16a16": "w"} if m == 70 else
                          {"w8a8": "s", "w16a8": "s", "w16a16": "s"})
    assert r["w8a16_variant"] == {1: "quant_w8a16_f16_m8", 17: "quant_w8a16_f16_m32",
                                  70: "quant_w8a16_f16_w_a16"}[m]


def test_mlp_case_runs_every_implementation(kr):
    rng = np.random.default_rng(1)
    layers, ln = bq._mlp_weights(rng, [16, 32, 32, 2])
    r = bq.mlp_case(_TorchOnCpu(), layers, ln, 3, quick=True, label="smoke", device="cpu")
    for name, c in r["cases"].items():
        assert "error" not in c, (name, c)
        tol = 0.05 if name.startswith("tickgpu") else 1e-5
        assert c["max_rel_err_vs_fp32"] < tol, (name, c["max_rel_err_vs_fp32"])


def test_surrogate_section_runs_every_scheme(kr):
    r = bq.surrogate_section(quick=True)
    assert set(r["schemes"]) == set(bq.SCHEMES)
    for scheme, c in r["schemes"].items():
        assert "error" not in c, (scheme, c)
        assert c["max_abs_diff_vs_cpu_reference"] < 1e-6, scheme   # the mock computes the reference
        assert c["p50_us_1"] > 0 and c["p50_us_64"] > 0
    assert max(r["schemes"]["w16a16"]["max_rel_err_vs_fp32"]) <= 1e-4
    assert max(r["schemes"]["w16a8"]["max_rel_err_vs_fp32"]) > 1e-3
    t = bq.evaluate_targets({"surrogate": r})
    assert t["surrogate_w16a8_err<=1e-4"] is False and t["surrogate_w16a16_err<=1e-4"] is True
    assert t["surrogate_w16a16_max_rel_err_vs_fp32"] <= 1e-4


def test_suite_refuses_without_cuda_torch(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    from tickgpu.errors import BackendUnavailable
    with pytest.raises(BackendUnavailable, match="no CUDA device"):
        bq.run(types.SimpleNamespace(out=str(tmp_path), quick=True))


def test_targets_put_each_model_step_beside_the_floor_and_pytorch():
    res = {"floor": {"graph H2D+kernel+D2H 1024 floats": {"p50_us": 20.0}},
           "signal_mlp": [{"model": "m", "batch": b, "cases": {
               "tickgpu_w8a16_gpu": {"p50_us": us}, "tickgpu_w8a16_gpu_bound": {"p50_us": us - 5},
               "tickgpu_w8a8_gpu": {"error": "x"},
               "torch_eager_fp32_gpu": {"p50_us": 130.0}}} for b, us in ((1, 25.0), (64, 30.0))],
           "gemm": [{"m": 4096, "n": 4096, "k": 4096, "cases": {
               "tickgpu_w8a8_gemm": {"batched_us": 100.0}, "torch_fp16_matmul": {"batched_us": 150.0},
               "torch_int_mm_dequant": {"batched_us": 300.0}}}]}
    t = bq.evaluate_targets(res)
    assert t["mlp_w8a16_within_1.3x_floor_graph"] == "1 of 2"          # 1.25x and 1.5x
    assert t["mlp_w8a16_over_floor_graph_range"] == [1.25, 1.5]
    assert t["mlp_w8a16_5x_torch_eager"] == "1 of 2"                   # 5.2x and 4.3x
    assert "mlp_w8a8_within_1.3x_floor_graph" not in t                 # no timing: nothing claimed
    assert t["mlp_w8a16_bound_within_1.3x_floor_graph"] == "2 of 2"    # 1.0x and 1.25x
    assert t["mlp_w8a16_bound_over_floor_graph_range"] == [1.0, 1.25]
    assert [s["bound_p50_us"] for s in t["signal_mlp"]] == [20.0, 25.0]
    assert "mlp_w8a8_bound_within_1.3x_floor_graph" not in t
    assert t["w8a8_4096_fp16_over_tickgpu>=1.3"] == 1.5 and t["w8a8_4096_int_mm_dequant_over_tickgpu>=1.1"] == 3.0
    assert [s["p50_us"] for s in t["signal_mlp"]] == [25.0, 30.0]
    # Without the floor's figures, no ratio to it is made up.
    res.pop("floor")
    t = bq.evaluate_targets(res)
    assert "mlp_w8a16_within_1.3x_floor_graph" not in t and "over_floor_graph" not in t["signal_mlp"][0]
    assert "mlp_w8a16_bound_within_1.3x_floor_graph" not in t and "bound_over_floor_graph" not in t["signal_mlp"][0]
