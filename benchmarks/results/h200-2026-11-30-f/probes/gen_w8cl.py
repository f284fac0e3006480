import itertools, subprocess
from concurrent.futures import ThreadPoolExecutor
cfgs = [(2, 2, 16, 1, 2), (2, 2, 8, 1, 2), (2, 2, 8, 2, 2), (2, 1, 16, 1, 2), (2, 2, 16, 1, 4), (2, 4, 8, 1, 4),
        (1, 2, 16, 2, 2), (1, 1, 16, 2, 2), (2, 2, 8, 1, 4), (2, 4, 16, 1, 4), (2, 1, 8, 2, 2), (1, 2, 8, 2, 4)]
def build(c):
    mt, nt, w, g, cl = c
    name = f"c_{mt}_{nt}_{w}_{g}_{cl}"
    src = f'/tmp/w8cl_{name}.cu'
    open(src, 'w').write(f'#include "/work/main/.probe/w8a16_cluster.cu"\n'
                         f'extern "C" __global__ void __cluster_dims__({cl},1,1) __launch_bounds__({w*32}) {name}(TG_W8A16_PARAMS(__half)) '
                         f'{{ gemm_cl<{mt},{nt},{w},{g},{cl}>(TG_W8A16_ARGS); }}\n')
    r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", "-fmad=false", "-Xptxas", "-v", "-o", f"w8cl/{name}.cubin", src],
                       capture_output=True, text=True)
    regs = [l for l in r.stderr.splitlines() if "registers" in l or "spill" in l or "error" in l]
    return name, r.returncode, " | ".join(x.strip() for x in regs)
with ThreadPoolExecutor(12) as ex:
    for name, rc, info in ex.map(build, cfgs):
        print(name, rc, info)
