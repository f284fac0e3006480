import subprocess
from concurrent.futures import ThreadPoolExecutor
# mt, nt, warps, group, rg
cfgs = [(2, 1, 32, 1, 2), (2, 1, 16, 1, 2), (2, 1, 32, 1, 4), (1, 1, 32, 2, 2), (1, 1, 16, 2, 2), (2, 1, 16, 1, 1), (1, 1, 16, 2, 1),
        (2, 1, 32, 1, 1), (2, 1, 16, 2, 1), (2, 1, 32, 2, 2)]
def build(c):
    mt, nt, w, g, rg = c
    name = f"r_{mt}_{nt}_{w}_{g}_{rg}"
    src = f'/tmp/w8rg_{name}.cu'
    open(src, 'w').write(f'#include "/work/main/.probe/w8a16_rg.cu"\n'
                         f'extern "C" __global__ void __launch_bounds__({w*32}, {1024 // (w*32)}) {name}(TG_W8A16_PARAMS(__half)) '
                         f'{{ tg_w8a16::gemm_rg<{mt},{nt},{w},{g},__half,false,{rg}>(TG_W8A16_ARGS); }}\n')
    r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", "-fmad=false", "-Xptxas", "-v", "-o", f"w8rg/{name}.cubin", src],
                       capture_output=True, text=True)
    regs = [l for l in r.stderr.splitlines() if "registers" in l or "spill" in l or "error" in l]
    return name, r.returncode, " | ".join(x.strip() for x in regs)
with ThreadPoolExecutor(8) as ex:
    for name, rc, info in ex.map(build, cfgs):
        print(name, rc, info)
