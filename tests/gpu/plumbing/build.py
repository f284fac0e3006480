"""Build the plumbing bundle (tests/gpu/plumbing/bundle) from kernels.cu with nvcc; needs no GPU.

    python tests/gpu/plumbing/build.py
"""
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "cpu"))
from cuda_mock import kernel_entry  # noqa: E402  (the contract's natural parameter layout)

ENTRIES = {("greeks", "f64"): "plumb_greeks_f64", ("greeks", "f32"): "plumb_greeks_f32",
           ("implied_vol", "f64"): "plumb_iv_f64", ("implied_vol", "f32"): "plumb_iv_f32",
           ("surface", "f64"): "plumb_surface_f64"}


def main():
    out = HERE / "bundle"
    kernels = []
    for arch in ("sm_80", "sm_90"):
        (out / arch).mkdir(parents=True, exist_ok=True)
        cubin = out / arch / "plumbing.cubin"
        subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-O2", "-o", str(cubin), str(HERE / "kernels.cu")], check=True)
        for (family, dtype), entry in ENTRIES.items():
            for block in (64, 256):
                for a16 in (True, False):
                    e = kernel_entry(family, dtype, block, block, a16, source="cuda", arch=arch,
                                     variant=f"plumb_{family}_{dtype}_b{block}{'_a16' if a16 else ''}")
                    e["file"], e["entry"] = f"{arch}/plumbing.cubin", entry
                    kernels.append(e)
    (out / "manifest.json").write_text(json.dumps({"format": 1, "created": "plumbing",
                                                   "compilers": {"triton": None, "nvcc": "see nvcc --version", "ptxas": None}, "kernels": kernels},
                                                  indent=1))


if __name__ == "__main__":
    main()
