#!/usr/bin/env python3
"""Train the two reference models of tickgpu.quant and measure what quantization costs them.

(a) a small signal MLP on order-book features of the bundled LOBSTER sample (AMZN, 2012-06-21,
    level 1, 57,514 events): LayerNorm -> Linear(F, 32) -> GELU -> Linear(32, 32) -> GELU -> Linear(32, 1),
    predicting the mid-price change over the next 50 events (in basis points) from causal features.
(b) a neural Black-Scholes surrogate: (moneyness K/S, t, vol) -> (call price / S, delta), r = q = 0,
    checked against the analytic float64 formula.

Each is evaluated in fp32, fp16, W8A8, W16A8 (int16 weights as two int8 limbs), W16A16 (int16 weights
and activations, each as two int8 limbs) and W8A16 through
tickgpu.quant.QuantMLP's CPU reference (which defines the GPU results). Training uses PyTorch on the
CPU, deterministically (fixed seeds, one thread); the library itself never imports torch.

Writes
  src/tickgpu/data/quant_signal_mlp.npz, src/tickgpu/data/quant_bsm_surrogate.npz (weights),
  benchmarks/results/quant-accuracy-<date>.json and .md (the accuracy table).

Usage: python scripts/train_quant_models.py [--quick | --eval-only]
(--eval-only: the committed weights evaluated again, nothing trained or saved but the tables)
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tickgpu.app import signal as app_signal  # noqa: E402
from tickgpu.app import surrogate as app_surrogate  # noqa: E402
from tickgpu.quant import EmaStandardizer, QuantMLP, check_causal, quantize_activations, quantize_weight  # noqa: E402

DATA = ROOT / "src" / "tickgpu" / "data"
RESULTS = ROOT / "benchmarks" / "results"
FORMATS = ["fp32", "fp16", "w8a8", "w16a8", "w16a16", "w8a16"]
HORIZON = app_signal.HORIZON  # events ahead for the signal target


# -- (a) signal model ----------------------------------------------------------------------------

def load_amzn():
    msg = np.loadtxt(DATA / "AMZN_2012-06-21_34200000_57600000_message_1.csv", delimiter=",", skiprows=1)
    book = np.loadtxt(DATA / "AMZN_2012-06-21_34200000_57600000_orderbook_1.csv", delimiter=",", skiprows=1)
    return msg, book


def signal_features(msg, book):
    """Causal features at each event (row i uses events <= i only) and the future target."""
    ask, ask_sz, bid, bid_sz = book[:, 0], book[:, 1], book[:, 2], book[:, 3]
    feats = app_signal.signal_features(msg[:, 0], msg[:, 1], msg[:, 3], msg[:, 5], ask, ask_sz, bid, bid_sz)
    logmid = np.log(0.5 * (ask + bid))
    target = np.full(len(logmid), np.nan)
    target[:-HORIZON] = (logmid[HORIZON:] - logmid[:-HORIZON]) * 1e4
    return feats, target


def prepare_signal():
    msg, book = load_amzn()
    raw, target = signal_features(msg, book)
    # Causal standardization (EMA mean/std of past ticks only), then clipping of the fat tails.
    alpha, clip = app_signal.STANDARDIZER_ALPHA, app_signal.CLIP
    feats = np.clip(EmaStandardizer(alpha=alpha).transform(raw), -clip, clip)
    report = check_causal(lambda s: EmaStandardizer(alpha=alpha).transform(s[:3000]), raw[:3000], cuts=5)
    keep = np.isfinite(target)
    keep[:app_signal.WARMUP_EVENTS] = False  # warm-up of the standardizer and the 100-event return
    x, y = feats[keep].astype(np.float32), np.clip(target[keep], -30, 30).astype(np.float32)
    split = int(app_signal.TRAIN_FRACTION * len(x))
    return (x[:split], y[:split]), (x[split:], y[split:]), report


# -- (b) Black-Scholes surrogate -----------------------------------------------------------------

def bsm_call(moneyness, t, vol):
    """Call price / spot and delta for spot 1, strike = moneyness, r = q = 0 (float64)."""
    from scipy.special import ndtr

    sd = vol * np.sqrt(t)
    d1 = (-np.log(moneyness) + 0.5 * sd * sd) / sd
    d2 = d1 - sd
    return ndtr(d1) - moneyness * ndtr(d2), ndtr(d1)




# -- training --------------------------------------------------------------------------------------

def train(model, x, y, *, steps, batch, lr, seed):
    import torch

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for step in range(steps):
        idx = torch.randint(0, len(xt), (batch,), generator=gen)
        loss = torch.nn.functional.mse_loss(model(xt[idx]), yt[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return float(loss.detach())


def state_dict_np(model):
    return {k: v.detach().cpu().numpy().astype(np.float32) for k, v in model.state_dict().items()}


# -- evaluation ------------------------------------------------------------------------------------

def _layers(sd):
    return QuantMLP.from_state_dict(sd, scheme="fp32").layers


def tensor_table(sd, x_eval):
    """Quantization error of each tensor class alone: weights and activations, per format."""
    rows = []
    mlp = QuantMLP.from_state_dict(sd, scheme="fp32")
    for i, lin in enumerate(mlp.layers):
        w = lin.weight_float.astype(np.float64)
        norm = np.linalg.norm(w)
        for fmt, method in (("int8", "per-channel absmax, symmetric"), ("int16", "per-channel min/max, asymmetric")):
            err = np.linalg.norm(quantize_weight(w, fmt).dequantize() - w) / norm
            rows.append({"tensor": f"weight L{i}", "format": fmt, "scale": method, "rel_error": err})
        w16 = w.astype(np.float16).astype(np.float64)
        rows.append({"tensor": f"weight L{i}", "format": "fp16", "scale": "-",
                     "rel_error": np.linalg.norm(w16 - w) / norm})
    # activations entering each layer, from the float model
    h = mlp.normalize_cpu(x_eval.astype(np.float32))
    for i, lin in enumerate(mlp.layers):
        norm = np.linalg.norm(h)
        for bits in (8, 16):
            a = quantize_activations(h, bits=bits)
            deq = a.q * a.scale.astype(np.float64)[:, None]
            rows.append({"tensor": f"activation into L{i}", "format": f"int{bits}", "scale": "per-token absmax",
                         "rel_error": np.linalg.norm(deq - h) / norm})
        rows.append({"tensor": f"activation into L{i}", "format": "fp16", "scale": "-",
                     "rel_error": np.linalg.norm(h.astype(np.float16).astype(np.float64) - h) / norm})
        h = lin.forward_cpu(h)
    return rows


SCALE_METHOD = {
    "fp32": "-", "fp16": "-",
    "w8a8": "W: per-channel absmax (int8 sym.); A: per-token absmax (int8 sym.)",
    "w16a8": "W: per-channel min/max (int16 asym., 2 int8 limbs); A: per-token absmax (int8 sym.)",
    "w16a16": "W: per-channel min/max (int16 asym., 2 int8 limbs); A: per-token absmax (int16 sym., 2 int8 limbs)",
    "w8a16": "W: per-channel absmax (int8 sym.); A: fp16",
}


def eval_signal(sd, x, y):
    ref = QuantMLP.from_state_dict(sd, scheme="fp32")(x)[:, 0].astype(np.float64)
    rows = []
    for fmt in FORMATS:
        t0 = time.perf_counter()
        p = QuantMLP.from_state_dict(sd, scheme=fmt)(x)[:, 0].astype(np.float64)
        rows.append({
            "model": "signal", "format": fmt, "scale": SCALE_METHOD[fmt],
            "max_abs_err_vs_fp32_bps": float(np.abs(p - ref).max()),
            "rms_err_vs_fp32_rel_std": float(np.sqrt(np.mean((p - ref) ** 2)) / ref.std()),
            "corr_with_fp32": float(np.corrcoef(p, ref)[0, 1]),
            "ic_vs_realized": float(np.corrcoef(p, y)[0, 1]),
            "sign_agreement_with_fp32": float(np.mean(np.sign(p) == np.sign(ref))),
            "cpu_ms": 1e3 * (time.perf_counter() - t0),
        })
    return rows


def eval_bsm(sd, raw, x):
    price, delta = bsm_call(raw[:, 0], raw[:, 1], raw[:, 2])
    rows = []
    ref = QuantMLP.from_state_dict(sd, scheme="fp32")(x).astype(np.float64)
    for fmt in FORMATS:
        p = QuantMLP.from_state_dict(sd, scheme=fmt)(x).astype(np.float64)
        rows.append({
            "model": "bsm_surrogate", "format": fmt, "scale": SCALE_METHOD[fmt],
            "price_max_abs_err_vs_analytic": float(np.abs(p[:, 0] - price).max()),
            "price_rms_err_vs_analytic": float(np.sqrt(np.mean((p[:, 0] - price) ** 2))),
            "delta_max_abs_err_vs_analytic": float(np.abs(p[:, 1] - delta).max()),
            "delta_rms_err_vs_analytic": float(np.sqrt(np.mean((p[:, 1] - delta) ** 2))),
            "price_max_abs_err_vs_fp32": float(np.abs(p[:, 0] - ref[:, 0]).max()),
            "delta_max_abs_err_vs_fp32": float(np.abs(p[:, 1] - ref[:, 1]).max()),
            # relative: the largest error against fp32 over the output's largest magnitude
            "price_max_rel_err_vs_fp32": float(np.abs(p[:, 0] - ref[:, 0]).max() / np.abs(ref[:, 0]).max()),
            "delta_max_rel_err_vs_fp32": float(np.abs(p[:, 1] - ref[:, 1]).max() / np.abs(ref[:, 1]).max()),
        })
    return rows


def markdown(meta, signal_rows, bsm_rows, tensor_rows):
    out = [f"# tickgpu.quant accuracy ({meta['date']}, commit {meta['commit']})", "",
           f"Machine: {meta['machine']}. Produced by `scripts/train_quant_models.py` on the CPU reference "
           "(which defines the GPU kernels' results). Units: signal outputs in basis points of mid price; "
           "surrogate prices as a fraction of spot.", "",
           f"## (a) Signal MLP, LOBSTER AMZN 2012-06-21, test = last 30% of the day ({meta['signal_test_rows']} events)",
           "", f"Model: {meta['signal_arch']}; IC = correlation of the prediction with the realized "
           f"{HORIZON}-event mid change.", "",
           "| format | scale method | max abs err vs fp32 (bps) | rms err / std(fp32 output) | corr with fp32 | sign agreement | IC |",
           "|---|---|---|---|---|---|---|"]
    for r in signal_rows:
        out.append(f"| {r['format']} | {r['scale']} | {r['max_abs_err_vs_fp32_bps']:.2e} | "
                   f"{r['rms_err_vs_fp32_rel_std']:.2e} | {r['corr_with_fp32']:.6f} | "
                   f"{r['sign_agreement_with_fp32']:.4f} | {r['ic_vs_realized']:.4f} |")
    out += ["", f"## (b) Black-Scholes surrogate ({meta['bsm_arch']}), {meta['bsm_test_rows']} random test points",
            "", "Domain: K/S in [0.7, 1.3], t in [0.02, 2] years, vol in [0.05, 0.8], r = q = 0. Errors against "
            "the analytic float64 formula (price / spot, delta).", "",
            "The relative errors against fp32 are the largest error over the output's largest magnitude "
            "(price 0.46, delta 1.0).", "",
            "| format | scale method | price max err | price rms err | delta max err | delta rms err | price max err vs fp32 | delta max err vs fp32 | relative, price / delta |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in bsm_rows:
        out.append(f"| {r['format']} | {r['scale']} | {r['price_max_abs_err_vs_analytic']:.2e} | "
                   f"{r['price_rms_err_vs_analytic']:.2e} | {r['delta_max_abs_err_vs_analytic']:.2e} | "
                   f"{r['delta_rms_err_vs_analytic']:.2e} | {r['price_max_abs_err_vs_fp32']:.2e} | "
                   f"{r['delta_max_abs_err_vs_fp32']:.2e} | {r['price_max_rel_err_vs_fp32']:.1e} / "
                   f"{r['delta_max_rel_err_vs_fp32']:.1e} |")
    out += ["", "## Per tensor class (relative Frobenius error of the tensor alone)", "",
            "| model | tensor | format | scale method | rel. error |", "|---|---|---|---|---|"]
    for r in tensor_rows:
        out.append(f"| {r['model']} | {r['tensor']} | {r['format']} | {r['scale']} | {r['rel_error']:.2e} |")
    out.append("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--quick", action="store_true", help="fewer training steps (smoke test; weights not saved)")
    ap.add_argument("--eval-only", action="store_true",
                    help="evaluate the committed weights (no training, no torch; weights not saved)")
    args = ap.parse_args()
    t0 = time.time()
    (xs, ys), (xs_test, ys_test), causal = prepare_signal()
    nf = xs.shape[1]
    if args.eval_only:
        sd_sig, sd_bsm = (_saved(name) for name in ("quant_signal_mlp.npz", "quant_bsm_surrogate.npz"))
        # the training losses of those weights, from the table they were trained for (if here)
        past = sorted(RESULTS.glob("quant-accuracy-*[0-9].json"))
        meta = json.loads(past[-1].read_text())["meta"] if past else {}
        loss_sig, loss_bsm = meta.get("signal_train_loss"), meta.get("bsm_train_loss")
    else:
        sd_sig, loss_sig, sd_bsm, loss_bsm = _train(args, xs, ys, nf, t0)
    _report(args, sd_sig, sd_bsm, loss_sig, loss_bsm, xs_test, ys_test, causal, nf, t0)


def _saved(name):
    z = np.load(DATA / name)
    return {k: z[k] for k in z.files if not k.startswith("test_")}


def _train(args, xs, ys, nf, t0):
    import torch

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    steps_sig, steps_bsm = (300, 300) if args.quick else (4000, 12000)
    torch.manual_seed(1)
    sig = torch.nn.Sequential(torch.nn.LayerNorm(nf), torch.nn.Linear(nf, 32), torch.nn.GELU(),
                              torch.nn.Linear(32, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
    loss_sig = train(sig, xs, ys[:, None], steps=steps_sig, batch=256, lr=2e-3, seed=1)
    sd_sig = state_dict_np(sig)
    print(f"signal: {len(xs)} train / {len(xs_test)} test events, loss {loss_sig:.3f}, {time.time() - t0:.0f}s")

    rng = np.random.default_rng(2)
    raw_train = app_surrogate.sample_inputs(rng, 200_000)
    p, d = bsm_call(*raw_train.T)
    torch.manual_seed(2)
    bsm = torch.nn.Sequential(torch.nn.Linear(3, 64), torch.nn.GELU(), torch.nn.Linear(64, 64), torch.nn.GELU(),
                              torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 2))
    loss_bsm = train(bsm, app_surrogate.scale_inputs(raw_train), np.column_stack([p, d]).astype(np.float32),
                     steps=steps_bsm, batch=512, lr=3e-3, seed=2)
    sd_bsm = state_dict_np(bsm)
    print(f"bsm: loss {loss_bsm:.2e}, {time.time() - t0:.0f}s")
    return sd_sig, loss_sig, sd_bsm, loss_bsm


def _report(args, sd_sig, sd_bsm, loss_sig, loss_bsm, xs_test, ys_test, causal, nf, t0):
    raw_test = app_surrogate.sample_inputs(np.random.default_rng(app_surrogate.TEST_SEED), 20_000)
    x_bsm_test = app_surrogate.scale_inputs(raw_test)
    signal_rows = eval_signal(sd_sig, xs_test, ys_test)
    bsm_rows = eval_bsm(sd_bsm, raw_test, x_bsm_test)
    tensor_rows = [{"model": "signal", **r} for r in tensor_table(sd_sig, xs_test[:5000])] + \
                  [{"model": "bsm_surrogate", **r} for r in tensor_table(sd_bsm, x_bsm_test[:5000])]

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    meta = {
        "date": dt.date.today().isoformat(), "commit": commit,
        "machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "signal_arch": f"LayerNorm({nf}) -> Linear({nf},32) -> GELU -> Linear(32,32) -> GELU -> Linear(32,1)",
        "bsm_arch": "Linear(3,64) -> GELU -> Linear(64,64) -> GELU -> Linear(64,64) -> GELU -> Linear(64,2)",
        "signal_test_rows": int(len(xs_test)), "bsm_test_rows": int(len(raw_test)),
        "signal_train_loss": loss_sig, "bsm_train_loss": loss_bsm,
        "feature_standardization_causal_checks": causal.checks,
        "quick": args.quick, "eval_only": args.eval_only, "train_seconds": time.time() - t0,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = f"quant-accuracy-{meta['date']}" + ("-quick" if args.quick else "")
    with open(RESULTS / f"{stem}.json", "w") as f:
        json.dump({"meta": meta, "signal": signal_rows, "bsm_surrogate": bsm_rows, "tensors": tensor_rows},
                  f, indent=1, default=float)
    md = markdown(meta, signal_rows, bsm_rows, tensor_rows)
    (RESULTS / f"{stem}.md").write_text(md)
    if not (args.quick or args.eval_only):
        np.savez_compressed(DATA / "quant_signal_mlp.npz", **sd_sig,
                            test_x=xs_test[:256], test_fp32=QuantMLP.from_state_dict(sd_sig, scheme="fp32")(xs_test[:256]))
        np.savez_compressed(DATA / "quant_bsm_surrogate.npz", **sd_bsm, test_raw=raw_test[:256])
    print(md)


if __name__ == "__main__":
    main()
