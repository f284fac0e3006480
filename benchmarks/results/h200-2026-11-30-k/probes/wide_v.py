"""Probe: the cluster step with stages left out (.probe/mlp3_wide_v.cu, -DSKIP_*), device time of
back-to-back launches (events over 300) and of single launches (events around one, median of 50)."""
import json, os, subprocess
import cupy as cp
import numpy as np
from cuda.bindings import driver as cu
from tickgpu.kernels.quant import mlp3_wide_shared
from tickgpu.quant import QuantMLP

rng = np.random.default_rng(3)
VARIANTS = {"full": [], "no_gemm": ["SKIP_GEMM"], "no_exchange": ["SKIP_EXCH"], "no_weights": ["SKIP_W"],
            "no_params": ["SKIP_PRE"], "none_of_them": ["SKIP_GEMM", "SKIP_EXCH", "SKIP_W", "SKIP_PRE"]}
res = []
for width in (256, 1024):
    smem = mlp3_wide_shared(width, 16, True)
    dims = [64, width, width, 4]
    layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1) for i, o in zip(dims[:-1], dims[1:])]
    mlp = QuantMLP(layers, layernorm=(rng.uniform(0.5, 1.5, 64), rng.standard_normal(64) * 0.1), scheme="w8a16")
    dev = []
    for lin in mlp.layers:
        kp = -(-lin.in_features // 16) * 16
        w = np.zeros((lin.out_features, kp), np.int8); w[:, :lin.in_features] = lin.weight_q.q
        dev.append((cp.asarray(w), cp.asarray(lin.weight_q.scale.astype(np.float32)), cp.asarray(np.asarray(lin.bias, np.float32)), kp))
    g, b, eps = mlp.layernorm
    g, b = cp.asarray(np.asarray(g, np.float32)), cp.asarray(np.asarray(b, np.float32))
    for name, macros in VARIANTS.items():
        cubin = f"/tmp/v_{width}_{name}.cubin"
        subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", "-fmad=false", f"-DTG_MLP3W_WIDTH={width}",
                        "-DTG_MLP3W_CLUSTER=16", "-DTG_MLP3W_LN=1", f"-DTG_MLP3W_SMEM={smem}", *(f"-D{m}=1" for m in macros),
                        "-o", cubin, ".probe/mlp3_wide_v.cu"], check=True)
        mod = cp.RawModule(path=cubin)
        fn = mod.get_function("tg_mlp3_w8a16_wide_kernel")
        fn.max_dynamic_shared_size_bytes = smem
        err, = cu.cuFuncSetAttribute(cu.CUfunction(fn.kernel.ptr), cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
        assert err == cu.CUresult.CUDA_SUCCESS, err
        for batch in (1, 16):
            x = rng.standard_normal((batch, 64)).astype(np.float32)
            xd = cp.asarray(x)
            y = cp.zeros((batch, 4), cp.float32)
            args = [xd, g, b]
            for w, s_, bias, kp in dev:
                args += [w, w, s_, s_, bias]
            args += [y, np.int32(batch), np.int32(64), np.int32(width), np.int32(width), np.int32(4), np.int32(64),
                     np.int32(dev[0][3]), np.int32(dev[1][3]), np.int32(dev[2][3]), np.int32(4), np.float32(eps)]
            grid = (-(-batch // 16) * 16,)
            launch = lambda: fn(grid, (512,), tuple(args), shared_mem=smem)
            for _ in range(50):
                launch()
            cp.cuda.Device().synchronize()
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record()
            for _ in range(300):
                launch()
            e1.record(); e1.synchronize()
            b2b = cp.cuda.get_elapsed_time(e0, e1) / 300 * 1e3
            single = []
            for _ in range(50):
                e0.record(); launch(); e1.record(); e1.synchronize()
                single.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
            r = {"width": width, "batch": batch, "variant": name, "back_to_back_us": b2b,
                 "single_p50_us": float(np.median(single))}
            print(r, flush=True)
            res.append(r)
with open(os.path.join(os.environ.get("OUT", "."), "wide-variants.json"), "w") as f:
    json.dump(res, f, indent=1)
