"""Probe: the CUDA C small-batch W8A16 variants at row counts other than their own (m8 at 9-32
rows: one block per 8 rows; m16 at 17-32), device time through scripts/quant-sweep's graph timing,
weights hot in L2 and rotated over four copies, beside torch fp16."""
import importlib.machinery, json, os
import torch
qs = importlib.machinery.SourceFileLoader("qs", "scripts/quant-sweep").load_module()
dev = "cuda"
g = torch.Generator(device=dev).manual_seed(7)
N = K = 4096
res = []
bs = [torch.randint(-127, 128, (N, K), dtype=torch.int8, device=dev, generator=g) for _ in range(4)]
w16s = [torch.randn((N, K), dtype=torch.float16, device=dev, generator=g) for _ in range(4)]
b_scale = torch.rand(N, device=dev, generator=g) * 1e-2
bias = torch.randn(N, device=dev, generator=g)
for M in (8, 9, 12, 13, 16, 17, 24, 32):
    a = torch.randn((M, K), dtype=torch.float16, device=dev, generator=g)
    c = torch.empty((M, N), dtype=torch.float16, device=dev)
    ref = (a.double() @ bs[0].double().T) * b_scale[None, :].double() + bias[None, :].double()
    row = {"M": M, "fp16_us": qs.events_us(torch, lambda: torch.matmul(a, w16s[0].T))}
    turn = iter(range(1 << 30))
    row["fp16_rot_us"] = qs.events_us(torch, lambda: torch.matmul(a, w16s[next(turn) % 4].T))
    for variant, bm in (("m8", 8), ("m16", 16), ("m32", 32)):
        if bm > 32 or (variant == "m32" and M <= 16):
            continue
        grid = (qs.triton_cdiv(M, bm) * qs.triton_cdiv(N, 16),)
        run = qs.bundle_launcher(torch, f"quant_w8a16_f16_{variant}", grid, a, b_scale, bias, c, M, N, K, bs[0])
        run(); torch.cuda.synchronize()
        err = float(((c.double() - ref).abs() / ref.abs().clamp_min(1e-1)).max())
        us = qs.events_us(torch, run)
        turn = iter(range(1 << 30))
        rot = qs.events_us(torch, lambda: run(bs[next(turn) % 4]))
        row[variant] = {"us": us, "rot_us": rot, "over_fp16": row["fp16_us"] / us, "rot_over_fp16": row["fp16_rot_us"] / rot,
                        "max_rel_err": err}
    print(json.dumps(row), flush=True)
    res.append(row)
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "w8a16-rows.json"), "w"), indent=1)
