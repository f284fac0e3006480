import itertools, subprocess, sys, os
from concurrent.futures import ThreadPoolExecutor
cfgs = [c for c in itertools.product((1, 2), (1, 2, 4), (4, 8, 16), (1, 2, 4))]
def build(c):
    mt, nt, w, g = c
    name = f"k_{mt}_{nt}_{w}_{g}"
    src = f'/tmp/w8cu_{name}.cu'
    open(src, 'w').write(f'#define TG_W8A16_WARPS {w}\n#define TG_W8A16_NT {nt}\n#define TG_W8A16_GROUP {g}\n'
                         f'#include "/work/main/csrc/cuda/w8a16.cu"\n'
                         f'extern "C" __global__ void __launch_bounds__({w*32}) {name}(TG_W8A16_PARAMS(__half)) '
                         f'{{ tg_w8a16::gemm<{mt},{nt},{w},{g},__half,false>(TG_W8A16_ARGS); }}\n')
    r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", "-fmad=false", "-Xptxas", "-v", "-o", f"w8cu/{name}.cubin", src],
                       capture_output=True, text=True)
    regs = [l for l in r.stderr.splitlines() if "registers" in l or "spill" in l]
    return name, r.returncode, " | ".join(x.strip() for x in regs)
with ThreadPoolExecutor(16) as ex:
    for name, rc, info in ex.map(build, cfgs):
        print(name, rc, info)
