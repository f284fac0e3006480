import json, os, subprocess
import cupy as cp
import numpy as np
from cuda.bindings import driver as cu
res = []
for cl, threads, smem, syncs, blocks in [(0, 512, 0, 0, 16), (0, 512, 231088, 0, 16), (16, 512, 0, 0, 16), (16, 512, 231088, 0, 16),
                                   (16, 256, 33816, 0, 16), (8, 512, 231088, 0, 16), (16, 512, 231088, 4, 16), (16, 512, 231088, 0, 64),
                                   (0, 256, 0, 0, 1)]:
    cubin = f"/tmp/e_{cl}_{threads}_{syncs}.cubin"
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", f"-DCL={cl}", f"-DTHREADS={threads}", f"-DSYNCS={syncs}",
                    "-o", cubin, ".probe/empty_cl.cu"], check=True)
    mod = cp.RawModule(path=cubin)
    fn = mod.get_function("probe_kernel")
    if smem > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = smem
    if cl > 8:
        err, = cu.cuFuncSetAttribute(cu.CUfunction(fn.kernel.ptr), cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
        assert err == cu.CUresult.CUDA_SUCCESS
    y = cp.zeros(64, cp.float32)
    launch = lambda: fn((blocks,), (threads,), (y, np.int32(0)), shared_mem=smem)
    for _ in range(100):
        launch()
    cp.cuda.Device().synchronize()
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    e0.record()
    for _ in range(500):
        launch()
    e1.record(); e1.synchronize()
    b2b = cp.cuda.get_elapsed_time(e0, e1) / 500 * 1e3
    single = []
    for _ in range(100):
        e0.record(); launch(); e1.record(); e1.synchronize()
        single.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
    r = dict(cluster=cl, threads=threads, smem=smem, syncs=syncs, blocks=blocks, back_to_back_us=round(b2b, 2),
             single_p50_us=round(float(np.median(single)), 2))
    print(r, flush=True)
    res.append(r)
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "empty-cluster.json"), "w"), indent=1)
