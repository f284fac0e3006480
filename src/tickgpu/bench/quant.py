"""`tickgpu bench --suite quant`: the quantized GEMMs and small models side by side with PyTorch.

Four sections, measured in one run on one GPU:

* ``gemm``: one linear layer ``(M, K) x (N, K)^T`` for M in 1..4096 at N = K = 4096 and at signal-model
  sizes (256-1024): tickgpu's W8A8 (int8 tensor cores, fused per-token x per-channel epilogue), W16A8
  (two int8 weight limbs), W16A16 (weight and activation limbs) and W8A16 (weight-only) kernels, each as
  the GEMM alone (operands already quantized) and, for the int8-activation and int16-activation schemes,
  as the whole layer (activation quantization kernel + GEMM from float32);
  against ``torch.matmul`` in float16 and bfloat16, and ``torch._int_mm`` followed by a separate
  dequantization (per-token x per-channel scales, bias, float16), alone and with PyTorch's own
  activation quantization in front. Outputs are float16 everywhere.
* ``signal_mlp``: a 3-layer MLP (LayerNorm, Linear-GELU-Linear-GELU-Linear; hidden 256-1024, batch
  1-64, plus the shipped 12-32-32-1 signal model) called from Python with NumPy in and NumPy out:
  tickgpu ``QuantMLP(backend="gpu")`` for each scheme, the CPU reference, and PyTorch eager float32 on
  the GPU and on the CPU (tensor from NumPy, forward, back to NumPy).
* ``surrogate``: the shipped Black-Scholes surrogate on the GPU in each scheme, its largest error
  against the float32 model over 20,000 points (relative to each output's largest magnitude; target
  1e-4), beside the float16 model's, and a step's time at 1 and 64 points.
* ``crossover``: what ``backend="auto"`` needs (tickgpu.dispatch): for ``QuantLinear`` (op
  "quant_linear"; W8A8, 256 x 256 and 1,024 x 1,024) and ``QuantMLP`` (op "quant_mlp"; the shipped
  model and 64-256-256-4 with LayerNorm, W8A8) the CPU backend against the GPU backend, NumPy in
  and out, over 1..1,024 rows, and the range of rows where the GPU won for every model measured
  (``gpu_range``, what tickgpu/data/crossover.json ships).

GEMM timing: everything runs on one stream (tickgpu's, which PyTorch is told to use), so CUDA events
bracket exactly the work of each call. Per case: ``p50_us`` / ``p99_us`` of events around each single
call (the GPU may wait for the host to enqueue: that is the cost a per-tick loop pays), and
``batched_us``, the mean over many calls queued back to back between two events (device time when the
host keeps ahead), from which ``tops`` = 2 M N K / batched time. tickgpu launches are checked and packed
once (`KernelRuntime.prepare`), as a model step would hold them. Model timing: wall clock per call
(perf_counter), medians and p99 after warm-up (at most ~2 s of calls per case). Each tickgpu GEMM result is checked against the NumPy
reference on a few rows (``max_abs_err``).

With ``--floor`` (the floor programs' output), ``targets`` puts each model step beside the floor's
"graph H2D + kernel + D2H, 1,024 floats" from the same run (target: within 1.3x) and beside PyTorch
eager float32 on the GPU (target: 5x faster), and W8A8 at 4096^3 beside its targets (1.3x fp16,
1.1x ``_int_mm`` + dequantization; W8A16 at M <= 16 against fp16 is scripts/quant-sweep's, in device
time), W16A8 and W16A16 at 4096^3 against fp16, and the surrogate's errors.

torch is imported here only (never by the library). Results are printed and saved as JSON.
"""
from __future__ import annotations

import math
import time

import numpy as np

import tickgpu
from tickgpu.bench.common import run_sections, write_results
from tickgpu.bench.gpu import machine_info, parse_floor, stats_us, time_calls

GEMM_M = (1, 16, 17, 64, 65, 128, 129, 1024, 4096)
GEMM_NK = ((4096, 4096), (256, 256), (512, 512), (1024, 1024))
MLP_HIDDEN = (256, 512, 1024)
MLP_BATCH = (1, 16, 64)
MLP_FEATURES, MLP_OUTPUTS = 64, 4
CHECK_ROWS = 16   # rows of each tickgpu GEMM result compared with the NumPy reference


# ---- timing ---------------------------------------------------------------------------------------

def time_events(torch, fn, stream, repeats: int, warmup: int = 20) -> dict:
    """CUDA-event timing of `fn` on `stream`: per-call percentiles and the back-to-back mean."""
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for s, e in zip(starts, ends):
        s.record(stream)
        fn()
        e.record(stream)
    ends[-1].synchronize()
    out = stats_us([s.elapsed_time(e) * 1e6 for s, e in zip(starts, ends)])
    b0, b1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    b0.record(stream)
    for _ in range(repeats):
        fn()
    b1.record(stream)
    b1.synchronize()
    out["batched_us"] = b0.elapsed_time(b1) * 1e3 / repeats
    return out


def _repeats(m: int, n: int, k: int, quick: bool) -> int:
    if quick:
        return 20
    return 50 if m * n * k >= 1 << 34 else 200


# ---- the GEMM section -----------------------------------------------------------------------------

def _pad_k(a: np.ndarray, k_pad: int) -> np.ndarray:
    out = np.zeros((a.shape[0], k_pad), a.dtype)
    out[:, : a.shape[1]] = a
    return out


def _torch_quant_rows(torch, x):
    """Per-token symmetric int8 in PyTorch eager (what a user would write): codes and scales."""
    amax = x.abs().amax(dim=1, keepdim=True).clamp_min(2.0 ** -100)
    scale = amax / 127.0
    q = torch.round(x / scale).clamp_(-127, 127).to(torch.int8)
    return q, scale.squeeze(1)


def gemm_case(torch, kr, stream, rng, m: int, n: int, k: int, quick: bool, device: str = "cuda") -> dict:
    """Every implementation of one (M, N, K) layer: timings, TOPS, and tickgpu's error on a few rows.

    `device` is where the PyTorch side runs ("cuda"; tests pass "cpu" with a driver stand-in).
    """
    from tickgpu.quant import gemm as ref
    from tickgpu.quant._gpu import gemm_tile, w8a16_launch
    from tickgpu.quant.schemes import quantize_activations, quantize_weight

    dev = torch.device(device)
    k_pad = -(-k // 16) * 16
    w = (rng.standard_normal((n, k)) / math.sqrt(k)).astype(np.float32)
    bias = (rng.standard_normal(n) * 0.1).astype(np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w8, w16 = quantize_weight(w, "int8"), quantize_weight(w, "int16")
    hi, lo = w16.limbs
    tiles = {scheme: gemm_tile(scheme, m, n, kr.sm_count) for scheme in ("w8a8", "w16a8", "w16a16")}
    row_block = 64 if k <= 64 else 512

    # tickgpu: operands resident, launches prepared once.
    xb = kr.upload(x)
    x16 = kr.upload(x.astype(np.float16))
    xq, xs, xr = kr.empty((m, k_pad), "int8"), kr.empty((m,), "float32"), kr.empty((m,), "int32")
    # W16A16's activations: int16 codes as two int8 limbs a row (hi, then lo), and their own scales
    xq16, xs16, xr16 = kr.empty((m, 2 * k_pad), "int8"), kr.empty((m,), "float32"), kr.empty((m,), "int32")
    g, b0 = kr.upload(np.ones(k, np.float32)), kr.upload(np.zeros(k, np.float32))
    b8 = kr.upload(_pad_k(w8.q, k_pad))
    bhi, blo = kr.upload(_pad_k(hi, k_pad)), kr.upload(_pad_k(lo, k_pad))
    s8, s16, off = kr.upload(w8.scale), kr.upload(w16.scale), kr.upload(w16.limb_offset)
    bb = kr.upload(bias)
    c8, c16, c1616, cw = (kr.empty((m, n), "float16") for _ in range(4))
    act = kr.prepare(f"quant_act_k{row_block}", None, [xb, g, b0, xq, xs, xr, m, k, k, k_pad, 1e-5])
    act.launch(sync=True)   # the codes the GEMMs read
    act16 = kr.prepare(f"quant_act16_k{row_block}", None, [xb, g, b0, xq16, xs16, xr16, m, k, k, 2 * k_pad, 1e-5])
    act16.launch(sync=True)
    w8a8 = kr.prepare(f"quant_gemm_w8a8_f16_{tiles['w8a8']}", None,
                      [xq, xs, xr, b8, b8, s8, s8, bb, c8, m, n, k_pad, k_pad, k_pad, n])
    w16a8 = kr.prepare(f"quant_gemm_w16a8_f16_{tiles['w16a8']}", None,
                       [xq, xs, xr, bhi, blo, s16, off, bb, c16, m, n, k_pad, k_pad, k_pad, n])
    w16a16 = kr.prepare(f"quant_gemm_w16a16_f16_{tiles['w16a16']}", None,
                        [xq16, xs16, xr16, bhi, blo, s16, off, bb, c1616, m, n, k_pad, 2 * k_pad, k_pad, n])
    w8a16_variant, _ = w8a16_launch(m, n, k, k, k_pad, False, "f16", kr.sm_count, getattr(kr, "has", None))
    w8a16 = kr.prepare(w8a16_variant, None, [x16, b8, s8, bb, cw, m, n, k, k, k_pad, n])

    # PyTorch: the same data.
    tx = torch.from_numpy(x).to(dev)
    tx16, txbf = tx.half(), tx.bfloat16()
    tw = torch.from_numpy(w).to(dev)
    tw16, twbf = tw.half(), tw.bfloat16()
    tbias = torch.from_numpy(bias).to(dev)
    tw8t = torch.from_numpy(w8.q).to(dev).t()          # (K, N) column-major: cuBLASLt's int8 layout
    tsw = torch.from_numpy(w8.scale).to(dev)
    txq, txs = _torch_quant_rows(torch, tx)
    int_mm_rows = m
    try:
        torch._int_mm(txq, tw8t)
    except RuntimeError:
        int_mm_rows = 17   # cuBLAS int8 wants M > 16 on this PyTorch: pad with zero rows (exact)
    pad_rows = int_mm_rows - m

    def int_mm(q):
        if pad_rows:
            q = torch.cat([q, q.new_zeros((pad_rows, q.shape[1]))])
        acc = torch._int_mm(q, tw8t)[:m]
        return (acc.float() * (txs[:, None] * tsw[None, :]) + tbias).half()

    def int8_layer():
        q, s = _torch_quant_rows(torch, tx)
        if pad_rows:
            q = torch.cat([q, q.new_zeros((pad_rows, q.shape[1]))])
        acc = torch._int_mm(q, tw8t)[:m]
        return (acc.float() * (s[:, None] * tsw[None, :]) + tbias).half()

    cases = {
        "tickgpu_w8a8_gemm": w8a8.launch,
        "tickgpu_w8a8_layer": lambda: (act.launch(), w8a8.launch()),
        "tickgpu_w16a8_gemm": w16a8.launch,
        "tickgpu_w16a8_layer": lambda: (act.launch(), w16a8.launch()),
        "tickgpu_w16a16_gemm": w16a16.launch,
        "tickgpu_w16a16_layer": lambda: (act16.launch(), w16a16.launch()),
        "tickgpu_w8a16_gemm": w8a16.launch,
        "torch_fp16_matmul": lambda: torch.matmul(tx16, tw16.t()),
        "torch_bf16_matmul": lambda: torch.matmul(txbf, twbf.t()),
        "torch_int_mm_dequant": lambda: int_mm(txq),
        "torch_int8_layer": int8_layer,
    }
    reps = _repeats(m, n, k, quick)
    out: dict = {"m": m, "n": n, "k": k, "tiles": tiles, "w8a16_variant": w8a16_variant, "int_mm_rows": int_mm_rows,
                 "cases": {}}
    flops = 2.0 * m * n * k
    for name, fn in cases.items():
        try:
            st = time_events(torch, fn, stream, reps)
            st["tops"] = flops / (st["batched_us"] * 1e-6) / 1e12
        except Exception as e:   # one failing implementation does not stop the others
            st = {"error": f"{type(e).__name__}: {e}"}
        out["cases"][name] = st

    # Correctness of what was timed, on the first rows (the NumPy reference is exact for W8A8, W16A8
    # and W16A16).
    kr.synchronize()
    rows = min(m, CHECK_ROWS if n * k <= 1 << 22 else 4)   # NumPy's int64 GEMM is slow at 4096^2
    act_ref = quantize_activations(x[:rows])
    act16_ref = quantize_activations(x[:rows], bits=16)
    xh, xl = act16_ref.limbs
    want = {
        "tickgpu_w8a8_gemm": ref.linear_w8a8(act_ref.q, act_ref.scale, w8.q, w8.scale, bias, out_dtype="float16"),
        "tickgpu_w16a8_gemm": ref.linear_w16a8(act_ref.q, act_ref.scale, act_ref.rowsum, hi, lo, w16.scale,
                                               w16.limb_offset, bias, out_dtype="float16"),
        "tickgpu_w16a16_gemm": ref.linear_w16a16(xh, xl, act16_ref.scale, act16_ref.rowsum, hi, lo, w16.scale,
                                                 w16.limb_offset, bias, out_dtype="float16"),
        "tickgpu_w8a16_gemm": ref.linear_w8a16(x[:rows], w8.q, w8.scale, bias, out_dtype="float16"),
    }
    for name, buf in (("tickgpu_w8a8_gemm", c8), ("tickgpu_w16a8_gemm", c16), ("tickgpu_w16a16_gemm", c1616),
                      ("tickgpu_w8a16_gemm", cw)):
        got = kr.download(buf)[:rows].astype(np.float64)
        out["cases"][name]["max_abs_err"] = float(np.abs(got - want[name].astype(np.float64)).max())
    exact = w @ x[:rows].T
    out["float_max_abs"] = float(np.abs(exact).max())
    return out


def gemm_section(torch, kr, stream, quick: bool) -> list:
    rng = np.random.default_rng(11)
    shapes = GEMM_NK[:2] if quick else GEMM_NK
    ms = (1, 17, 129, 1024) if quick else GEMM_M
    rows = []
    for n, k in shapes:
        for m in ms:
            t0 = time.perf_counter()
            r = gemm_case(torch, kr, stream, rng, m, n, k, quick)
            rows.append(r)
            best = {name: c.get("batched_us") for name, c in r["cases"].items()}
            print(f"[gemm] M={m:5d} N={n} K={k}  " + "  ".join(
                f"{name.replace('tickgpu_', 'tg_')}={v:.1f}us" for name, v in best.items() if v is not None)
                + f"  ({time.perf_counter() - t0:.1f} s)", flush=True)
    return rows


# ---- the signal-model section ---------------------------------------------------------------------

def _mlp_weights(rng, dims):
    layers = [((rng.standard_normal((o, i)) / math.sqrt(i)).astype(np.float32),
               (rng.standard_normal(o) * 0.1).astype(np.float32)) for i, o in zip(dims[:-1], dims[1:])]
    ln = (rng.uniform(0.5, 1.5, dims[0]).astype(np.float32), (rng.standard_normal(dims[0]) * 0.1).astype(np.float32))
    return layers, ln


def _torch_mlp(torch, layers, ln, device):
    nn = torch.nn
    mods = [nn.LayerNorm(len(ln[0]))]
    for i, (w, b) in enumerate(layers):
        lin = nn.Linear(w.shape[1], w.shape[0])
        mods.append(lin)
        if i < len(layers) - 1:
            mods.append(nn.GELU())
    model = nn.Sequential(*mods).eval()
    with torch.no_grad():
        mods[0].weight.copy_(torch.from_numpy(ln[0]))
        mods[0].bias.copy_(torch.from_numpy(ln[1]))
        for lin, (w, b) in zip([m for m in mods if isinstance(m, nn.Linear)], layers):
            lin.weight.copy_(torch.from_numpy(w))
            lin.bias.copy_(torch.from_numpy(b))
    return model.to(device)


def mlp_case(torch, layers, ln, batch: int, quick: bool, label: str, device: str = "cuda") -> dict:
    from tickgpu.quant import QuantMLP

    rng = np.random.default_rng(batch)
    x = (rng.standard_normal((batch, layers[0][0].shape[1])) * 2).astype(np.float32)
    ref = QuantMLP(layers, layernorm=ln, scheme="fp32").forward_cpu(x).astype(np.float64)
    scale = float(np.abs(ref).max()) or 1.0
    reps = 200 if quick else 2000
    budget_s = 0.5 if quick else 2.0
    out: dict = {"model": label, "batch": batch, "dims": [layers[0][0].shape[1]] + [w.shape[0] for w, _ in layers],
                 "cases": {}}

    def record(name, fn):
        try:
            t0 = time.perf_counter()
            y = np.asarray(fn(), dtype=np.float64)
            one = time.perf_counter() - t0
            # slow implementations (the NumPy reference at hidden 1024) get fewer calls, not minutes
            repeats = int(max(5, min(reps, budget_s / max(one, 1e-6))))
            st = time_calls(fn, repeats, warmup=min(20, repeats))
            st["max_rel_err_vs_fp32"] = float(np.abs(y - ref).max() / scale)
        except Exception as e:
            st = {"error": f"{type(e).__name__}: {e}"}
        out["cases"][name] = st

    for scheme in SCHEMES:
        mlp = QuantMLP(layers, layernorm=ln, scheme=scheme, backend="gpu")
        record(f"tickgpu_{scheme}_gpu", lambda: mlp(x, check=False))
        # the same step bound to x once (QuantMLP.bind), as a tick loop owning x would call it
        try:
            step = mlp.bind(x, check=False)
        except Exception as e:
            out["cases"][f"tickgpu_{scheme}_gpu_bound"] = {"error": f"{type(e).__name__}: {e}"}
        else:
            record(f"tickgpu_{scheme}_gpu_bound", step)
    cpu = QuantMLP(layers, layernorm=ln, scheme="w8a8", backend="cpu")
    record("tickgpu_w8a8_cpu_reference", lambda: cpu(x, check=False))
    with torch.no_grad():
        gpu_model = _torch_mlp(torch, layers, ln, device)
        cpu_model = _torch_mlp(torch, layers, ln, "cpu")
        record("torch_eager_fp32_gpu",
               lambda: gpu_model(torch.from_numpy(x).to(device)).cpu().numpy())
        record("torch_eager_fp32_cpu", lambda: cpu_model(torch.from_numpy(x)).numpy())
    return out


def mlp_section(torch, quick: bool) -> list:
    rng = np.random.default_rng(5)
    rows = []
    hidden = MLP_HIDDEN[:1] if quick else MLP_HIDDEN
    for h in hidden:
        layers, ln = _mlp_weights(rng, [MLP_FEATURES, h, h, MLP_OUTPUTS])
        for batch in MLP_BATCH:
            rows.append(mlp_case(torch, layers, ln, batch, quick, f"random {MLP_FEATURES}-{h}-{h}-{MLP_OUTPUTS}"))
            _print_mlp(rows[-1])
    # The shipped signal model (tickgpu/data/quant_signal_mlp.npz: LayerNorm, 12-32-32-1).
    from tickgpu.app.signal import shipped_weights

    layers, ln = shipped_weights()
    for batch in (1, 64):
        rows.append(mlp_case(torch, layers, ln, batch, quick, "shipped signal model 12-32-32-1"))
        _print_mlp(rows[-1])
    return rows


def surrogate_section(quick: bool) -> dict:
    """The shipped Black-Scholes surrogate (tickgpu/data/quant_bsm_surrogate.npz: 3-64-64-64-2) on the
    GPU in each scheme, against its float32 CPU model on 20,000 random points (the accuracy table's
    domain and draw): the largest error of each output over that output's largest magnitude, and
    the float16 CPU model's for scale; with the p50 of a one-point and a 64-point call."""
    from tickgpu.app import surrogate
    from tickgpu.quant import QuantMLP

    sd = surrogate.shipped_state_dict()
    n = 2_000 if quick else 20_000
    x = surrogate.scale_inputs(surrogate.sample_inputs(np.random.default_rng(surrogate.TEST_SEED), n))
    ref = QuantMLP.from_state_dict(sd, scheme="fp32")(x).astype(np.float64)
    span = np.abs(ref).max(axis=0)
    out: dict = {"points": n, "output_max_abs": span.tolist(), "schemes": {}}
    fp16 = QuantMLP.from_state_dict(sd, scheme="fp16")(x).astype(np.float64)
    out["fp16_cpu_max_rel_err_vs_fp32"] = (np.abs(fp16 - ref).max(axis=0) / span).tolist()
    reps = 200 if quick else 2000
    for scheme in SCHEMES:
        try:
            mlp = QuantMLP.from_state_dict(sd, scheme=scheme, backend="gpu")
            got = mlp(x, check=False).astype(np.float64)
            cpu = QuantMLP.from_state_dict(sd, scheme=scheme, backend="cpu")(x).astype(np.float64)
            r = {"max_rel_err_vs_fp32": (np.abs(got - ref).max(axis=0) / span).tolist(),
                 "max_abs_diff_vs_cpu_reference": float(np.abs(got - cpu).max())}
            for rows in (1, 64):
                xr = np.ascontiguousarray(x[:rows])
                r[f"p50_us_{rows}"] = time_calls(lambda: mlp(xr, check=False), reps, warmup=50)["p50_us"]
        except Exception as e:
            r = {"error": f"{type(e).__name__}: {e}"}
        out["schemes"][scheme] = r
        print(f"[surrogate] {scheme}: {r}", flush=True)
    return out


CROSSOVER_ROWS = (1, 4, 16, 64, 256, 1024)


def _crossover_models(rng):
    """{op: [(label, CPU model, GPU model, in_features, most rows)]} for the crossover section."""
    from tickgpu.app.signal import shipped_weights
    from tickgpu.quant import QuantLinear, QuantMLP

    out: dict = {"quant_linear": [], "quant_mlp": []}
    for nk, most in ((256, 1024), (1024, 256)):   # the NumPy reference of 1,024 rows x 1,024^2: ~0.5 s
        w, b = rng.standard_normal((nk, nk)), rng.standard_normal(nk)
        out["quant_linear"].append((f"W8A8 {nk} x {nk}", QuantLinear(w, b, scheme="w8a8", backend="cpu"),
                                    QuantLinear(w, b, scheme="w8a8", backend="gpu"), nk, most))
    shipped = shipped_weights()
    wide = _mlp_weights(rng, [MLP_FEATURES, 256, 256, MLP_OUTPUTS])
    for label, (layers, ln) in (("shipped 12-32-32-1", shipped), (f"{MLP_FEATURES}-256-256-{MLP_OUTPUTS}", wide)):
        out["quant_mlp"].append((f"W8A8 {label}", QuantMLP(layers, layernorm=ln, scheme="w8a8", backend="cpu"),
                                 QuantMLP(layers, layernorm=ln, scheme="w8a8", backend="gpu"),
                                 layers[0][0].shape[1], 1024))
    return out


def _intersect(ranges):
    """The rows inside every (lo, hi) range (hi None: no upper end), or None where one is None or
    they do not overlap."""
    if not ranges or any(r is None for r in ranges):
        return None
    lo = max(r[0] for r in ranges)
    his = [r[1] for r in ranges if r[1] is not None]
    hi = min(his) if his else None
    return None if hi is not None and hi <= lo else (lo, hi)


def crossover_section(quick: bool) -> dict:
    """Per op, each model's CPU-vs-GPU sweep over rows (NumPy in and out, p50) and its GPU range
    (:func:`tickgpu.dispatch.range_from_sweep`), and the op's ``gpu_range``: the rows where the GPU
    won for every model. Slow calls (the NumPy reference of wide layers) get fewer repeats."""
    from tickgpu.dispatch import range_from_sweep

    rng = np.random.default_rng(11)
    budget_s = 0.2 if quick else 1.0
    out: dict = {}
    for op, models in _crossover_models(rng).items():
        sweeps = []
        for label, cpu, gpu, k, most in models:
            rows = []
            for n in (r for r in CROSSOVER_ROWS if r <= most):
                x = (rng.standard_normal((n, k)) * 2).astype(np.float32)
                row = {"n": n}
                for name, model in (("cpu", cpu), ("gpu", gpu)):
                    t0 = time.perf_counter()
                    model(x, check=False)
                    one = time.perf_counter() - t0
                    repeats = int(max(5, min(2000, budget_s / max(one, 1e-6))))
                    row[f"{name}_p50_us"] = time_calls(lambda: model(x, check=False), repeats,
                                                       warmup=min(20, repeats))["p50_us"]
                rows.append(row)
                print(f"[crossover] {op} {label} rows={n} cpu={row['cpu_p50_us']:.1f}us gpu={row['gpu_p50_us']:.1f}us",
                      flush=True)
            sweeps.append({"model": label, "sweep": rows, "gpu_range": range_from_sweep(rows)})
        out[op] = {"models": sweeps, "gpu_range": _intersect([m["gpu_range"] for m in sweeps])}
    return out


def _print_mlp(r: dict) -> None:
    parts = [f"{name}={c['p50_us']:.1f}us" for name, c in r["cases"].items() if "p50_us" in c]
    print(f"[mlp] {r['model']} batch={r['batch']}  " + "  ".join(parts), flush=True)


# ---- driver ---------------------------------------------------------------------------------------

def run(args) -> int:
    """Run the suite; ``args.out`` (result directory) and ``args.quick`` (small sweep) are read."""
    import torch

    from tickgpu.errors import BackendUnavailable
    from tickgpu.runtime import available, kernel_runtime, unavailable_reason

    if not torch.cuda.is_available():
        raise BackendUnavailable("the quant suite compares against PyTorch on the GPU, and torch sees no CUDA device")
    if not available():
        raise BackendUnavailable(f"no usable GPU for tickgpu ({unavailable_reason()})")
    quick = bool(getattr(args, "quick", False))
    torch.cuda.init()
    kr = kernel_runtime()
    res: dict = {"suite": "quant", "machine": machine_info(), "quick": quick,
                 "versions": {"torch": torch.__version__, "cuda": torch.version.cuda},
                 "floor": parse_floor(getattr(args, "floor", None))}
    t0 = time.perf_counter()
    tickgpu.warmup()
    res["warmup_s"] = time.perf_counter() - t0

    # One stream for everything: tickgpu's, with PyTorch told to queue there too.
    stream = torch.cuda.ExternalStream(kr.stream)
    sections = {
        "gemm": lambda: gemm_section(torch, kr, stream, quick),
        "signal_mlp": lambda: mlp_section(torch, quick),
        "surrogate": lambda: surrogate_section(quick),
        "crossover": lambda: crossover_section(quick),
    }
    with torch.cuda.stream(stream):
        run_sections(res, sections)
    torch.cuda.synchronize()

    res["targets"] = evaluate_targets(res)
    path = write_results("quant", res, getattr(args, "out", "benchmarks/results"))
    print_summary(res)
    print(f"saved {path}")
    return 0


SCHEMES = ("w8a16", "w8a8", "w16a8", "w16a16")


def evaluate_targets(res: dict) -> dict:
    """The suite's targets from one run's results: per model step and GEMM row, and counts."""
    from tickgpu.bench.gpu import note_floor_mode

    t: dict = {}
    note_floor_mode(t, res.get("floor", {}))
    floor = res.get("floor", {}).get("graph H2D+kernel+D2H 1024 floats", {}).get("p50_us")
    mlp = res.get("signal_mlp")
    if isinstance(mlp, list):
        steps = []
        for r in mlp:
            torch_us = r["cases"].get("torch_eager_fp32_gpu", {}).get("p50_us")
            for scheme in SCHEMES:
                us = r["cases"].get(f"tickgpu_{scheme}_gpu", {}).get("p50_us")
                if us is None:
                    continue
                row = {"model": r["model"], "batch": r["batch"], "scheme": scheme, "p50_us": us}
                bound = r["cases"].get(f"tickgpu_{scheme}_gpu_bound", {}).get("p50_us")
                if bound is not None:
                    row["bound_p50_us"] = bound
                if floor:
                    row["over_floor_graph"] = us / floor
                    if bound is not None:
                        row["bound_over_floor_graph"] = bound / floor
                if torch_us:
                    row["torch_eager_over_tickgpu"] = torch_us / us
                steps.append(row)
        t["signal_mlp"] = steps
        for scheme in SCHEMES:
            mine = [s for s in steps if s["scheme"] == scheme]
            if floor and mine:
                t[f"mlp_{scheme}_within_1.3x_floor_graph"] = (
                    f"{sum(s['over_floor_graph'] <= 1.3 for s in mine)} of {len(mine)}")
                t[f"mlp_{scheme}_over_floor_graph_range"] = [min(s["over_floor_graph"] for s in mine),
                                                             max(s["over_floor_graph"] for s in mine)]
                bound = [s for s in mine if "bound_over_floor_graph" in s]
                if bound:
                    t[f"mlp_{scheme}_bound_within_1.3x_floor_graph"] = (
                        f"{sum(s['bound_over_floor_graph'] <= 1.3 for s in bound)} of {len(bound)}")
                    t[f"mlp_{scheme}_bound_over_floor_graph_range"] = [
                        min(s["bound_over_floor_graph"] for s in bound), max(s["bound_over_floor_graph"] for s in bound)]
            with_torch = [s for s in mine if "torch_eager_over_tickgpu" in s]
            if with_torch:
                t[f"mlp_{scheme}_5x_torch_eager"] = (
                    f"{sum(s['torch_eager_over_tickgpu'] >= 5 for s in with_torch)} of {len(with_torch)}")
    gemm = res.get("gemm")
    if isinstance(gemm, list):
        for r in gemm:
            c = r["cases"]
            fp16 = c.get("torch_fp16_matmul", {}).get("batched_us")
            if (r["m"], r["n"], r["k"]) == (4096, 4096, 4096):
                w8 = c.get("tickgpu_w8a8_gemm", {}).get("batched_us")
                int_mm = c.get("torch_int_mm_dequant", {}).get("batched_us")
                if w8 and fp16:
                    t["w8a8_4096_fp16_over_tickgpu>=1.3"] = fp16 / w8
                if w8 and int_mm:
                    t["w8a8_4096_int_mm_dequant_over_tickgpu>=1.1"] = int_mm / w8
                for scheme in ("w16a8", "w16a16"):
                    us = c.get(f"tickgpu_{scheme}_gemm", {}).get("batched_us")
                    if us and fp16:
                        t[f"{scheme}_4096_fp16_over_tickgpu"] = fp16 / us
    sur = res.get("surrogate")
    if isinstance(sur, dict) and "schemes" in sur:
        for scheme, r in sur["schemes"].items():
            if "max_rel_err_vs_fp32" in r:
                t[f"surrogate_{scheme}_max_rel_err_vs_fp32"] = max(r["max_rel_err_vs_fp32"])
        for scheme in ("w16a8", "w16a16"):
            errs = sur["schemes"].get(scheme, {}).get("max_rel_err_vs_fp32")
            if errs is not None:
                t[f"surrogate_{scheme}_err<=1e-4"] = max(errs) <= 1e-4
    cross = res.get("crossover")
    if isinstance(cross, dict):
        t["auto_gpu_range_rows"] = {op: c.get("gpu_range") for op, c in cross.items() if isinstance(c, dict)}
    # W8A16 at M <= 16 is not judged here: a call of a few microseconds is shorter than a PyTorch
    # matmul's own dispatch, so the "batched" figures there are host time (scripts/quant-sweep
    # measures both sides' device time in replayed graphs).
    return t


def print_summary(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    gemm = res.get("gemm")
    if isinstance(gemm, list) and gemm:
        names = list(gemm[0]["cases"])
        t = Table(title="GEMM, batched us per call (TOPS)", title_justify="left")
        t.add_column("M x N x K")
        for name in names:
            t.add_column(name.replace("tickgpu_", "tg_").replace("torch_", "pt_"), justify="right")
        for r in gemm:
            cells = []
            for name in names:
                c = r["cases"][name]
                cells.append("err" if "batched_us" not in c else f"{c['batched_us']:.1f} ({c['tops']:.0f})")
            t.add_row(f"{r['m']} x {r['n']} x {r['k']}", *cells)
        console.print(t)
    mlp = res.get("signal_mlp")
    if isinstance(mlp, list) and mlp:
        names = list(mlp[0]["cases"])
        t = Table(title="signal MLP, NumPy in/out, p50 us per call", title_justify="left")
        t.add_column("model, batch")
        for name in names:
            t.add_column(name.replace("tickgpu_", "tg_").replace("torch_", "pt_"), justify="right")
        for r in mlp:
            t.add_row(f"{r['model']}, {r['batch']}",
                      *("err" if "p50_us" not in r["cases"][n] else f"{r['cases'][n]['p50_us']:.1f}" for n in names))
        console.print(t)
    targets = {k: v for k, v in res.get("targets", {}).items() if k != "signal_mlp"}
    if targets:
        t = Table(title="targets, same run", title_justify="left")
        t.add_column("target")
        t.add_column("measured", justify="right")
        for k, v in targets.items():
            t.add_row(k, f"{v:.4g}" if isinstance(v, float) else
                      (f"{v[0]:.3g}-{v[1]:.3g}" if isinstance(v, list) else str(v)))
        console.print(t)


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m tickgpu.bench.quant", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--floor", metavar="FLOOR_TXT", help="output of the floor programs (the graph round trip)")
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
