#!/usr/bin/env python3
"""Probe: the cluster-shared W8A16 kernel (csrc/cuda/w8a16_mc.cu) against the shipped small-batch
kernel (csrc/cuda/w8a16.cu, same build flags) and torch fp16, device time of 20 graph-replayed
launches (scripts/quant-sweep's events_us), hot (weights in L2) and rot (four weight copies in turn).
With --hints, the shipped kernel's cache-hint and blocks-an-SM variants (w8a16_hint.cu) instead.
Usage: w8a16mc.py CUBIN_DIR OUT_JSON [--hints]"""
import json, sys, importlib.util
from pathlib import Path
import numpy as np
import torch, cupy

ROOT = Path(__file__).resolve().parents[4]
spec = importlib.util.spec_from_loader("qs", loader=None)
qs_src = (ROOT / "scripts/quant-sweep").read_text()
qs = {"__file__": str(ROOT / "scripts/quant-sweep"), "__name__": "qs"}
exec(compile(qs_src.split("def main()")[0], "quant-sweep", "exec"), qs)
events_us = qs["events_us"]
cub = Path(sys.argv[1]); out_path = Path(sys.argv[2])
HINTS = "--hints" in sys.argv
cfgs = json.loads((cub / "configs.json").read_text())
hints = json.loads((cub / "hints.json").read_text())
dev = "cuda"
g = torch.Generator(device=dev); g.manual_seed(20261204)

def load(name, entry):
    return cupy.RawModule(path=str(cub / f"{name}.cubin")).get_function(entry)

def smem_bytes(K):
    return 16 * (2 * (-(-K // 64) * 64) + 16)

def launcher(fn, grid, block, smem, a, scale, bias, c, M, N, K, kpad):
    if smem > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = smem
    def run(w):
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        with stream:
            fn((grid,), (block,), (np.uint64(a.data_ptr()), np.uint64(w.data_ptr()), np.uint64(scale.data_ptr()),
                                  np.uint64(bias.data_ptr()), np.uint64(c.data_ptr()), np.int32(M), np.int32(N),
                                  np.int32(K), np.int32(a.stride(0)), np.int32(kpad), np.int32(N)), shared_mem=smem)
    return run

def case(M, N, K, timing, rows):
    kpad = -(-K // 16) * 16
    a = torch.randn((M, K), dtype=torch.float16, device=dev, generator=g)
    bs = [torch.randint(-127, 128, (N, kpad), dtype=torch.int8, device=dev, generator=g) for _ in range(4 if timing else 1)]
    scale = (torch.rand(N, device=dev, generator=g) * 0.02 + 0.001).float()
    bias = torch.randn(N, device=dev, generator=g).float()
    ref = (a.double() @ bs[0][:, :K].double().T) * scale.double() + bias.double()
    base = {"M": M, "N": N, "K": K}
    if timing:
        w16s = [torch.randn((N, K), dtype=torch.float16, device=dev, generator=g) for _ in range(4)]
        base["torch_fp16_us"] = events_us(torch, lambda: torch.matmul(a, w16s[0].T))
        turn = iter(range(1 << 30))
        base["torch_fp16_rot_us"] = events_us(torch, lambda: torch.matmul(a, w16s[next(turn) % 4].T))
    cands = [("small_m8" if M <= 8 else "small_m16", "tg_w8a16_small_kernel", 16, 16, 0, 1)]
    for c in hints if HINTS else []:
        if c["ok"] and (c["mt"] == 1) == (M <= 8):
            cands.append((c["name"], "tg_w8a16_small_kernel", c["warps"], 16, 0, 1))
    for c in [] if HINTS else cfgs:
        if c["ok"] and (c["mt"] == 1) == (M <= 8):
            cands.append((c["name"], "tg_w8a16_mc_kernel", c["warps"], 16 * c["nt"], smem_bytes(K), c["cl"]))
    ref_out = None
    for name, entry, warps, bn, smem, cl in cands:
        row = dict(base, kernel=name)
        try:
            fn = load(name, entry)
            tiles = -(-N // bn)
            grid = -(-tiles // cl) * cl if entry.endswith("mc_kernel") else (-(-M // (8 if M <= 8 else 16))) * tiles
            c = torch.full((M, N), float("nan"), dtype=torch.float16, device=dev)
            run = launcher(fn, grid, warps * 32, smem, a, scale, bias, c, M, N, K, kpad)
            run(bs[0]); torch.cuda.synchronize()
            err = float(((c.double() - ref).abs() / ref.abs().clamp_min(1e-1)).max())
            row["max_rel_err"] = err
            row["nan"] = int(torch.isnan(c).sum())
            if ref_out is None:
                ref_out = c.clone()
            else:
                row["bitwise_vs_small"] = bool(torch.equal(c, ref_out))
                row["max_abs_vs_small"] = float((c.float() - ref_out.float()).abs().max())
            if timing:
                row["us"] = events_us(torch, lambda: run(bs[0]))
                turn = iter(range(1 << 30))
                row["rot_us"] = events_us(torch, lambda: run(bs[next(turn) % 4]))
                row["over_fp16"] = base["torch_fp16_us"] / row["us"]
                row["rot_over_fp16"] = base["torch_fp16_rot_us"] / row["rot_us"]
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        print(json.dumps(row), flush=True)
        rows.append(row)

rows = []
print(torch.cuda.get_device_name(), flush=True)
for M, N, K in ((16, 4096, 4096), (8, 4096, 4096), (1, 4096, 4096), (12, 4096, 4096), (16, 1024, 1024), (16, 4096, 4096)):
    case(M, N, K, True, rows)
for M, N, K in ((15, 1000, 4104), (3, 1000, 4104), (1, 17, 8), (16, 33, 520), (7, 4096, 6144), (16, 250, 64)):
    case(M, N, K, False, rows)
out_path.write_text(json.dumps(rows, indent=1))
