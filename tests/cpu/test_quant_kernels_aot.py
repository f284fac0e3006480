"""The quant kernels compile ahead of time for sm_80 and sm_90 (no GPU needed), as the bundle builder
will compile them, and the PTX keeps the properties the bit-exactness argument relies on."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton")

SCRIPT = textwrap.dedent("""
    import json, re, sys
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from tickgpu.kernels.quant import QUANT_VARIANTS, divisibility_attrs
    want = set(sys.argv[1:])
    out = {}
    for v in QUANT_VARIANTS:
        if v["variant"] not in want:
            continue
        runs = [(80, v["constexprs"], ""), (90, v["constexprs"], "")]
        if "PDL" in v["constexprs"]:
            runs.append((90, dict(v["constexprs"], PDL=1), "pdl"))   # as the builder compiles sm_90
        for arch, constexprs, tag in runs:
            src = ASTSource(fn=v["kernel"], signature=v["signature"], constexprs=constexprs,
                            attrs=divisibility_attrs(v))
            k = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                               options={"num_warps": v["num_warps"], "num_stages": v["num_stages"], **v["options"]})
            ptx = k.asm["ptx"]
            out[f"{v['variant']}@{arch}{tag}"] = {
                "cubin": len(k.asm["cubin"]), "fma": len(re.findall(r"\\bfma\\.rn\\.f32", ptx)),
                "div_approx": len(re.findall(r"div\\.(full|approx)\\.f32", ptx)),
                "magic": ptx.count("0f4B400000"), "mma": len(re.findall(r"mma", ptx)),
                "cvt_bf16": len(re.findall(r"cvt\\.rn\\.bf16", ptx)),
                "cp16": len(re.findall(r"cp\\.async\\.cg\\.shared\\.global.*0x10", ptx)),
                "ld_b8": len(re.findall(r"ld\\.global(\\.\\w+)*\\.b8", ptx)),
                "gdc": len(re.findall(r"griddepcontrol\\.(wait|launch_dependents)", ptx)),
            }
    print(json.dumps(out))
""")


def test_quant_variants_compile_for_sm80_and_sm90():
    names = ["quant_act_k64", "quant_gemm_w16a8_bf16_s", "quant_w8a16_f32_s", "quant_gemm_w8a8_f32_l",
             "quant_w8a16_f16_s_a16", "quant_mlp3_w16a8_ln_h64", "quant_layernorm_f16_k64"]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *names], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    pdl = [n for n in names if not n.startswith("quant_mlp3_")]   # the one-kernel step has no predecessor
    assert len(res) == 2 * len(names) + len(pdl)
    for key, r in res.items():
        assert r["cubin"] > 0, key
        assert r["fma"] == 0, key           # no contraction: the epilogue rounds like the reference
        assert r["div_approx"] == 0, key    # divisions are IEEE (div_rn)
    for arch in (80, 90):
        assert res[f"quant_act_k64@{arch}"]["magic"] >= 2          # round-half-even kept, not folded
        assert res[f"quant_gemm_w16a8_bf16_s@{arch}"]["mma"] > 0   # int8 tensor cores
        assert res[f"quant_gemm_w16a8_bf16_s@{arch}"]["cvt_bf16"] > 0  # round-to-nearest narrowing
        assert res[f"quant_w8a16_f32_s@{arch}"]["mma"] > 0
        assert res[f"quant_w8a16_f32_s@{arch}"]["ld_b8"] > 0   # unaligned: byte loads
        fused = res[f"quant_mlp3_w16a8_ln_h64@{arch}"]
        assert fused["mma"] > 0 and fused["magic"] >= 2         # tensor cores; round-half-even kept
    # Programmatic dependent launch: both grid dependency instructions where the builder turns PDL
    # on (sm_90), none elsewhere.
    for name in pdl:
        assert res[f"{name}@90pdl"]["gdc"] == 2 and res[f"{name}@90"]["gdc"] == res[f"{name}@80"]["gdc"] == 0, name
    # The alignment promise is what turns byte loads into pipelined 16-byte async copies.
    for name in ("quant_gemm_w8a8_f32_l", "quant_gemm_w16a8_bf16_s", "quant_w8a16_f16_s_a16"):
        assert res[f"{name}@80"]["cp16"] > 0 and res[f"{name}@80"]["ld_b8"] == 0, name
