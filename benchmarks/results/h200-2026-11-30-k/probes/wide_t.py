"""Probe: the cluster step's phases (per-block %globaltimer stamps, .probe/mlp3_wide_t.cu) and its
device time back to back, launched directly (CuPy), x in device memory and in mapped host memory."""
import json, os, subprocess, sys
import cupy as cp
import numpy as np
from cuda.bindings import driver as cu
from tickgpu.kernels.quant import mlp3_wide_shared
from tickgpu.quant import QuantMLP

rng = np.random.default_rng(3)
res = []
NAMES = {0: "start", 1: "sync1", 2: "ln", 3: "w1wait", 10: "l1gemm", 13: "l1epi", 4: "l1send", 5: "in1wait", 11: "l2gemm", 14: "l2epi", 6: "l2send", 7: "in2wait", 12: "l3gemm", 8: "l3", 9: "end"}
for width in (1024,):
    cubin = f"/tmp/t_{width}_{os.environ.get('LEAN', '')}{os.environ.get('TWOPASS', '')}.cubin"
    smem = mlp3_wide_shared(width, 16, True)
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", "-fmad=false", f"-DTG_MLP3W_WIDTH={width}",
                    "-DTG_MLP3W_CLUSTER=16", "-DTG_MLP3W_LN=1", f"-DTG_MLP3W_SMEM={smem}", "-o", cubin,
                    ".probe/mlp3_wide_t.cu"], check=True)
    mod = cp.RawModule(path=cubin)
    fn = mod.get_function("tg_mlp3_w8a16_wide_kernel")
    fn.max_dynamic_shared_size_bytes = smem
    err, = cu.cuFuncSetAttribute(cu.CUfunction(fn.kernel.ptr), cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
    assert err == cu.CUresult.CUDA_SUCCESS, err
    times = cp.ndarray((64, 32), cp.uint64, memptr=mod.get_global("tg_mlp3w_times"))
    dims = [64, width, width, 4]
    layers = [(rng.standard_normal((o, i)) / np.sqrt(i), rng.standard_normal(o) * 0.1) for i, o in zip(dims[:-1], dims[1:])]
    ln = (rng.uniform(0.5, 1.5, 64), rng.standard_normal(64) * 0.1)
    mlp = QuantMLP(layers, layernorm=ln, scheme="w8a16")
    dev = []
    for lin in mlp.layers:
        kp = -(-lin.in_features // 16) * 16
        w = np.zeros((lin.out_features, kp), np.int8); w[:, :lin.in_features] = lin.weight_q.q
        dev.append((cp.asarray(w), cp.asarray(lin.weight_q.scale.astype(np.float32)), cp.asarray(np.asarray(lin.bias, np.float32)), kp))
    g, b, eps = mlp.layernorm
    g, b = cp.asarray(np.asarray(g, np.float32)), cp.asarray(np.asarray(b, np.float32))
    for batch in (1, 16, 64):
        x = rng.standard_normal((batch, 64)).astype(np.float32)
        want = mlp.forward_cpu(x)
        for where in ("device",):
            mem = None
            if where == "device":
                xd = cp.asarray(x)
            else:   # pinned host memory, addressed by the kernel across PCIe (unified addressing)
                mem = cp.cuda.alloc_pinned_memory(x.nbytes)
                np.frombuffer(mem, np.float32, x.size)[:] = x.ravel()
            y = cp.zeros((batch, 4), cp.float32)
            args = [xd if mem is None else np.uint64(mem.ptr), g, b]
            for w, s_, bias, kp in dev:
                args += [w, w, s_, s_, bias]
            args += [y, np.int32(batch), np.int32(64), np.int32(width), np.int32(width), np.int32(4), np.int32(64),
                     np.int32(dev[0][3]), np.int32(dev[1][3]), np.int32(dev[2][3]), np.int32(4), np.float32(eps)]
            grid = (-(-batch // 16) * 16,)
            launch = lambda: fn(grid, (512,), tuple(args), shared_mem=smem)
            for _ in range(50):
                launch()
            cp.cuda.Device().synchronize()
            got = cp.asnumpy(y)
            err = float(np.abs(got - want).max() / np.abs(want).max())   # (two passes: the second uses layer 3's weights for layer 1)
            stamps = []
            for _ in range(30):
                launch(); cp.cuda.Device().synchronize()
                t = cp.asnumpy(times)[: grid[0]].astype(np.int64)
                t[:, :16] -= t[:, 0].min()
                stamps.append(t)
            st = np.median(np.stack(stamps)[:, :, :16], axis=0)   # [block, phase]
            s0, s1 = cp.cuda.Event(), cp.cuda.Event()
            s0.record()
            for _ in range(200):
                launch()
            s1.record(); s1.synchronize()
            per = cp.cuda.get_elapsed_time(s0, s1) / 200 * 1e3
            phases = {name: float(np.median(st[:, i])) / 1e3 for i, name in NAMES.items()}
            raw = np.stack(stamps)   # [launch, block, 32]: gtime ns relative, clocks relative
            ck = (raw[:, :, 16 + 9] - raw[:, :, 16 + 0]).astype(np.float64)
            ns = (raw[:, :, 9] - raw[:, :, 0]).astype(np.float64)
            phases["sm_MHz"] = float(np.median(ck / ns) * 1e3)
            if os.environ.get("TWOPASS"):
                phases.update({"P2 " + name: float(np.median(st[:, i + 15])) / 1e3 for i, name in NAMES.items() if i < 10})
            last = float(st[:, 9].max()) / 1e3
            print(os.environ.get("LEAN", "full") + os.environ.get("TWOPASS", ""), width, batch, where, "err %.2g" % err, "back-to-back %.2f us" % per, "span %.2f us" % last,
                  " ".join("%s %.2f" % kv for kv in phases.items()), flush=True)
            res.append({"width": width, "batch": batch, "x": where, "rel_err_vs_cpu": err, "back_to_back_us": per,
                        "span_us": last, "phase_median_us": phases, "phase_max_us": [float(v) / 1e3 for v in st.max(axis=0)]})
with open(os.path.join(os.environ.get("OUT", "."), f"wide-phases{os.environ.get('LEAN', '')}{os.environ.get('TWOPASS', '')}.json"), "w") as f:
    json.dump(res, f, indent=1)
