"""Probe: CUDA C W8A16 small-M kernel (csrc/cuda/w8a16.cu) configs vs the Triton 's' kernel and cuBLAS fp16."""
import glob, json, os, sys
import numpy as np, torch, triton, cupy
sys.path.insert(0, "src")
import importlib.util as _u
_spec = _u.spec_from_file_location('tg_quant_kernels', 'src/tickgpu/kernels/quant.py'); _m = _u.module_from_spec(_spec); _spec.loader.exec_module(_m)

def graph_us(fn, reps=20):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3):
            fn(0)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for i in range(reps):
            fn(i)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(9):
        e0.record(); g.replay(); e1.record(); e1.synchronize()
        out.append(e0.elapsed_time(e1) * 1e3 / reps)
    out = sorted(out[1:])
    return out[len(out) // 2]

mods = {}
for p in sorted(glob.glob(".probe/w8cu/*.cubin")):
    name = os.path.basename(p)[:-6]
    mods[name] = cupy.RawModule(path=p).get_function(name)

def launch(fn, w, grid, a, b, scale, bias, c, M, N, K, sa, sb, sc):
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    with stream:
        fn((grid,), (w * 32,), (np.uint64(a.data_ptr()), np.uint64(b.data_ptr()), np.uint64(scale.data_ptr()),
                               np.uint64(bias.data_ptr()), np.uint64(c.data_ptr()), np.int32(M), np.int32(N), np.int32(K),
                               np.int32(sa), np.int32(sb), np.int32(sc)))

def main():
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(5)
    res = []
    shapes = [(1, 4096, 4096), (8, 4096, 4096), (16, 4096, 4096), (16, 1024, 1024), (1, 1024, 1024), (16, 256, 256),
              (4, 512, 512), (16, 8192, 8192), (1, 14336, 4096), (3, 1000, 1000), (13, 777, 1001)]
    for M, N, K in shapes:
        kp = -(-K // 16) * 16
        ncopy = 4 if N * K >= 4096 * 4096 else 1
        bs = [torch.randint(-127, 128, (N, kp), dtype=torch.int8, device=dev, generator=gen) for _ in range(ncopy)]
        w16 = [torch.randn((N, K), dtype=torch.float16, device=dev, generator=gen) for _ in range(ncopy)]
        sa = K if K % 2 == 0 else K + 1   # odd K: a row stride that is not a multiple of 8 -> element loads
        abuf = torch.randn((M, sa), dtype=torch.float16, device=dev, generator=gen)
        a = abuf[:, :K]
        scale = torch.rand(N, device=dev, generator=gen) * 1e-2
        bias = torch.randn(N, device=dev, generator=gen)
        c = torch.empty((M, N), dtype=torch.float16, device=dev)
        ref = (a.double() @ bs[0][:, :K].double().T) * scale.double() + bias.double()
        base = {"M": M, "N": N, "K": K,
                "fp16_hot_us": graph_us(lambda i: torch.matmul(a, w16[0].T)),
                "fp16_rot_us": graph_us(lambda i: torch.matmul(a, w16[i % ncopy].T))}
        # the Triton 's' kernel (bundle config), JIT
        def tri(i, b=None):
            bb = bs[i % ncopy] if b is None else b
            grid = (triton.cdiv(M, 16) * triton.cdiv(N, 32),)
            _m.w8a16_gemm_kernel[grid](abuf, bb, scale, bias, c, M, N, K, sa, kp, N, GELU=0, BLOCK_M=16, BLOCK_N=32,
                                       BLOCK_K=256, GROUP_M=8, FAST_CVT=1, num_warps=4, num_stages=4)
        try:
            tri(0); torch.cuda.synchronize()
            base["triton_err"] = float(((c.double() - ref).abs() / ref.abs().clamp_min(1e-1)).max())
            base["triton_hot_us"] = graph_us(lambda i: tri(0, bs[0]))
            base["triton_rot_us"] = graph_us(tri)
        except Exception as e:
            base["triton_error"] = str(e)[:300]
        print(json.dumps(base), flush=True)
        for name, fn in mods.items():
            _, mt, nt, w, g = name.split("_"); mt, nt, w, g = int(mt), int(nt), int(w), int(g)
            if mt == 1 and M > 8 and M <= 16 and nt != 2:
                continue
            grid = -(-M // (8 * mt)) * -(-N // (16 * nt))
            def run(i, b=None):
                launch(fn, w, grid, abuf, bs[i % ncopy] if b is None else b, scale, bias, c, M, N, K, sa, kp, N)
            row = dict(M=M, N=N, K=K, cfg=[mt, nt, w, g])
            try:
                c.fill_(float("nan")); run(0, bs[0]); torch.cuda.synchronize()
                err = float(((c.double() - ref).abs() / ref.abs().clamp_min(1e-1)).max())
                hot = graph_us(lambda i: run(0, bs[0]))
                rot = graph_us(run)
                row.update(hot_us=hot, rot_us=rot, x_hot=base["fp16_hot_us"] / hot, x_rot=base["fp16_rot_us"] / rot,
                           err=err)
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            print(json.dumps(row), flush=True)
            res.append(row)
        res.append(base)
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "w8a16cu-probe.json"), "w") as f:
        json.dump(res, f, indent=0)

if __name__ == "__main__":
    main()
