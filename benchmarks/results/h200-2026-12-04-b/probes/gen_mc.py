#!/usr/bin/env python3
"""Build the cluster-shared W8A16 probe's cubins (csrc/cuda/w8a16_mc.cu), one per configuration."""
import itertools, json, os, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
cfgs = []
for nt, warps, group, cl, stages in itertools.product((1, 2), (8, 16), (1, 2), (2, 4, 8), (1, 4, 8)):
    cfgs.append(dict(mt=2, nt=nt, warps=warps, group=group, cl=cl, stages=stages))
for group, cl in itertools.product((1, 2), (2, 4)):
    cfgs.append(dict(mt=1, nt=2, warps=16, group=group, cl=cl, stages=4))

def one(c):
    name = "mc_mt{mt}_nt{nt}_w{warps}_g{group}_cl{cl}_s{stages}".format(**c)
    cmd = ["nvcc", "-cubin", "-arch=sm_90a", "-O3", "-fmad=false", "-Xptxas", "-v", 
           f"-DTG_MC_MT={c['mt']}", "-DTG_MC_OUT=1", "-DTG_MC_GELU=0", f"-DTG_W8A16_NT={c['nt']}",
           f"-DTG_W8A16_WARPS={c['warps']}", f"-DTG_W8A16_GROUP={c['group']}", f"-DTG_W8A16_CL={c['cl']}",
           f"-DTG_W8A16_STAGES={c['stages']}", "-o", str(out / f"{name}.cubin"), str(Path(__file__).with_name("w8a16_mc.cu"))]
    r = subprocess.run(cmd, capture_output=True, text=True)
    info = [l for l in r.stderr.splitlines() if "registers" in l or "spill" in l]
    return dict(c, name=name, ok=r.returncode == 0, ptxas=info, err=r.stderr[-400:] if r.returncode else "")

with ThreadPoolExecutor(os.cpu_count()) as pool:
    res = list(pool.map(one, cfgs))
# the shipped kernel (w8a16.cu) in the same configurations, for the like-for-like check
for tile, mt, warps, group in (("m8", 1, 16, 2), ("m16", 2, 16, 1)):
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-O3", "-fmad=false", f"-DTG_W8A16_MT={mt}", "-DTG_W8A16_OUT=1",
                    "-DTG_W8A16_GELU=0", f"-DTG_W8A16_WARPS={warps}", f"-DTG_W8A16_GROUP={group}", "-DTG_W8A16_NT=1",
                    "-o", str(out / f"small_{tile}.cubin"), str(ROOT / "csrc/cuda/w8a16.cu")], check=True)
(out / "configs.json").write_text(json.dumps(res, indent=1))
print(sum(r["ok"] for r in res), "of", len(res), "built")
for r in res:
    if not r["ok"] or any("spill" in l and not l.strip().startswith("0 bytes") and " 0 bytes spill" not in l for l in r["ptxas"]):
        print(r["name"], r["ptxas"], r["err"])

# The shipped kernel with cache hints on its loads and a minimum of blocks an SM (w8a16_hint.cu).
hints = []
for (tile, mt, warps, group), hw, hx, minb in itertools.product(
        (("m16", 2, 16, 1), ("m16g2", 2, 16, 2), ("m8", 1, 16, 2)), (0, 1, 2, 3), (0, 1), (0, 2, 3)):
    hints.append(dict(tile=tile, mt=mt, warps=warps, group=group, hw=hw, hx=hx, minb=minb,
                      name=f"hint_{tile}_w{hw}_x{hx}_b{minb}"))

def two(c):
    cmd = ["nvcc", "-cubin", "-arch=sm_90", "-O3", "-fmad=false", "-Xptxas", "-v", f"-DTG_W8A16_MT={c['mt']}",
           "-DTG_W8A16_OUT=1", "-DTG_W8A16_GELU=0", f"-DTG_W8A16_WARPS={c['warps']}", f"-DTG_W8A16_GROUP={c['group']}",
           "-DTG_W8A16_NT=1", f"-DTG_HINT_W={c['hw']}", f"-DTG_HINT_X={c['hx']}", f"-DTG_HINT_MINB={c['minb']}",
           "-o", str(out / f"{c['name']}.cubin"), str(Path(__file__).with_name("w8a16_hint.cu"))]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return dict(c, ok=r.returncode == 0, ptxas=[l for l in r.stderr.splitlines() if "registers" in l or "spill" in l],
                err=r.stderr[-400:] if r.returncode else "")

with ThreadPoolExecutor(os.cpu_count()) as pool:
    hres = list(pool.map(two, hints))
(out / "hints.json").write_text(json.dumps(hres, indent=1))
print(sum(r["ok"] for r in hres), "of", len(hres), "hint variants built")
for r in hres:
    print(r["name"], r["ptxas"][-1].split(":")[-1] if r["ptxas"] else r["err"])
