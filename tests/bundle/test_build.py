"""`tickgpu build-kernels` without a GPU: the bundle it writes, and the committed bundle.

The builder runs once per session (sm_80 and sm_90) in a subprocess that must not import torch.
Its cubins are checked as ELF files and their parameter records (EIATTR_KPARAM_INFO, read here by a
small ELF reader of this test's own) against the manifest; the manifest against the contract; the
committed bundle (src/tickgpu/kernels/bundle) against the current sources and a fresh build, so a
stale bundle fails.
"""
import copy
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tickgpu.kernels import manifest as mf
from tickgpu.quant import _gpu

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "src" / "tickgpu" / "kernels"
COMMITTED = KERNELS / "bundle"
LBR_CORE = ROOT / "csrc" / "cpu" / "lbr_core.h"
TRITON_SOURCES = {"greeks": [KERNELS / "greeks.py", KERNELS / "erfcx.py"], "surface": [KERNELS / "surface.py"],
                  "quant": [KERNELS / "quant.py"]}
CUDA_SOURCES = {"implied_vol": [ROOT / "csrc" / "cuda" / "iv.cu", LBR_CORE],
                "resident_greeks": [ROOT / "csrc" / "cuda" / "mailbox.cu", ROOT / "csrc" / "cpu" / "greeks_kernel.h",
                                    ROOT / "csrc" / "hot" / "mailbox_protocol.h"],
                "noop": [ROOT / "csrc" / "cuda" / "noop.cu"],
                "scale": [ROOT / "csrc" / "cuda" / "noop.cu"],
                "quant": [ROOT / "csrc" / "cuda" / "w8a16.cu"]}
ARCHS = ("sm_80", "sm_90")
EM_CUDA = 190


def _nvcc():
    from tickgpu.kernels.build import find_nvcc
    return find_nvcc()


def buildable_families():
    fams = ["greeks", "surface", "quant"]
    if LBR_CORE.is_file() and _nvcc():
        fams.append("implied_vol")
    if _nvcc():
        fams += ["resident_greeks", "noop", "scale"]
    return fams


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A bundle built now, for sm_80 and sm_90, by a process that has neither torch nor a GPU."""
    pytest.importorskip("triton", reason="building kernels needs Triton (the 'build' extra)")
    out = tmp_path_factory.mktemp("bundle")
    argv = ["--out", str(out), "-q"]
    for a in ARCHS:
        argv += ["--arch", a]
    for f in buildable_families():
        argv += ["--family", f]
    code = ("import sys\n"
            "from tickgpu.kernels.build import main\n"
            f"rc = main({argv!r})\n"
            "assert 'torch' not in sys.modules, 'the builder imported torch'\n"
            "sys.exit(rc)\n")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    env.pop("TRITON_INTERPRET", None)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert res.returncode == 0, f"build-kernels failed:\n{res.stdout}\n{res.stderr}"
    return out


# ---- an ELF reader independent of the builder ------------------------------------------------

def elf_sections(data: bytes) -> dict:
    assert data[:4] == b"\x7fELF", "no ELF magic"
    assert data[4] == 2 and data[5] == 1, "not a little-endian ELF64 file"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = headers[shstrndx][4]

    def name(off):
        return data[strtab + off:data.index(b"\0", strtab + off)].decode()
    return {name(h[0]): data[h[4]:h[4] + h[5]] for h in headers}


def kparam_info(nv_info: bytes) -> list:
    """(ordinal, offset, size) of every EIATTR_KPARAM_INFO record of a .nv.info.<kernel> section."""
    out, i = [], 0
    while i < len(nv_info):
        fmt, attr = nv_info[i], nv_info[i + 1]
        if fmt == 0x04:                        # EIFMT_SVAL: u16 size, then the payload
            size, = struct.unpack_from("<H", nv_info, i + 2)
            if attr == 0x17:                   # EIATTR_KPARAM_INFO
                _, ordinal, offset, flags = struct.unpack_from("<IHHI", nv_info, i + 4)
                out.append((ordinal, offset, (flags >> 18) & 0x3FFF))
            i += 4 + size
        elif fmt in (0x01, 0x02, 0x03):        # no value / byte / half-word: 4 bytes in all
            i += 4
        else:
            raise AssertionError(f"unknown .nv.info record format {fmt:#x}")
    return sorted(out)


# ---- the fresh bundle ------------------------------------------------------------------------

def test_fresh_bundle_has_every_variant(fresh):
    raw = json.loads((fresh / "manifest.json").read_text())
    assert raw["format"] == 1
    families = buildable_families()
    elementwise = [k for k in raw["kernels"] if k["family"] != "quant"]
    got = {(k["arch"], k["family"], k["dtype"], k["elements_per_block"], k["aligned16"]) for k in elementwise}
    for arch in ARCHS:
        # float64 greeks: only the one-warp 32-element variant (the H200 kernel-sweep; see build.py)
        for dt, blocks in (("f32", (128, 256)), ("f64", (32,))):
            for block in blocks:
                for a16 in (False, True):
                    assert (arch, "greeks", dt, block, a16) in got
        for block in (128, 256):
            for a16 in (False, True):
                assert (arch, "surface", "f64", block, a16) in got
        if "implied_vol" in families:
            for dt in ("f32", "f64"):
                assert (arch, "implied_vol", dt, 256, False) in got
        if "resident_greeks" in families:
            for dt in ("f32", "f64"):
                assert (arch, "resident_greeks", dt, 1024, False) in got
        if "noop" in families:
            assert (arch, "noop", "f32", 32, False) in got
        if "scale" in families:
            assert (arch, "scale", "f32", 256, False) in got
    assert len(elementwise) == len(got)
    # The quant family: every variant of the table, for every arch.
    from tickgpu.kernels.quant import QUANT_VARIANTS, w8a16_small_variants
    quant = {(k["arch"], k["variant"]) for k in raw["kernels"] if k["family"] == "quant"}
    want = [v["variant"] for v in QUANT_VARIANTS]
    if _nvcc():   # the CUDA C small-batch W8A16 kernel
        want += [v["variant"] for v in w8a16_small_variants()]
    assert quant == {(a, v) for a in ARCHS for v in want}
    # Nothing but the manifest and the listed cubins.
    files = sorted(p.relative_to(fresh).as_posix() for p in fresh.rglob("*") if p.is_file())
    assert files == sorted(["manifest.json"] + [k["file"] for k in raw["kernels"]])


def test_fresh_cubins_are_cuda_elf_with_the_manifest_parameters(fresh):
    raw = json.loads((fresh / "manifest.json").read_text())
    for k in raw["kernels"]:
        data = (fresh / k["file"]).read_bytes()
        sections = elf_sections(data)
        assert struct.unpack_from("<H", data, 18)[0] == EM_CUDA, k["variant"]
        info = sections.get(f".nv.info.{k['entry']}")
        assert info is not None, f"{k['variant']}: no kernel {k['entry']} in the cubin"
        want = [(i, p["offset"], p["size"]) for i, p in enumerate(k["params"])]
        assert kparam_info(info) == want, k["variant"]


def test_fresh_manifest_fields(fresh):
    """The manifest against the contract, written out here rather than through mf.validate."""
    raw = json.loads((fresh / "manifest.json").read_text())
    assert set(raw) == {"format", "created", "compilers", "kernels"}
    assert set(raw["compilers"]) == {"triton", "nvcc", "ptxas"}
    import triton
    assert raw["compilers"]["triton"] == triton.__version__
    fields = {"variant", "family", "arch", "file", "entry", "source", "source_hash", "num_warps", "block",
              "shared", "elements_per_block", "dtype", "aligned16", "params", "scratch"}
    for k in raw["kernels"]:
        if k["family"] == "quant":
            _check_quant_entry(k, fields)
            continue
        assert set(k) == fields, k.get("variant")
        assert k["file"] == f"{k['arch']}/{k['variant']}.cubin"
        assert isinstance(k["aligned16"], bool) and k["dtype"] in ("f32", "f64")
        # Dynamic shared memory to pass at launch (the greeks kernel's per-tile reduction); the
        # runtime raises no function attribute, so it must stay within the default 48 KB.
        assert isinstance(k["shared"], int) and 0 <= k["shared"] <= 48 * 1024, k["variant"]
        assert k["scratch"] == {"global": 0, "global_align": 1, "profile": 0}, k["variant"]
        threads = k["block"][0] * k["block"][1] * k["block"][2]
        assert threads == k["num_warps"] * 32
        if k["source"] == "triton":
            assert k["block"] == [k["num_warps"] * 32, 1, 1]
            assert [p["name"] for p in k["params"][-2:]] == ["global_scratch", "profile_scratch"]
            assert k["elements_per_block"] % threads == 0
        else:
            assert k["elements_per_block"] == threads and not k["aligned16"]
        end = 0
        for p in k["params"]:
            assert p["size"] == {"ptr": 8, "i32": 4}[p["kind"]]
            assert p["offset"] % p["size"] == 0 and p["offset"] >= end, (k["variant"], p)
            end = p["offset"] + p["size"]
        names = [p["name"] for p in k["params"]]
        assert names[:len(mf.FAMILY_PARAMS[k["family"]])] == [n for n, _ in mf.FAMILY_PARAMS[k["family"]]]
    mf.load_manifest(fresh)      # and the runtime's own check accepts it


QUANT_ARGS = {   # the quant kernels' argument lists, written out here from the kernel source
    "act_quant_kernel": "x_ptr gamma_ptr beta_ptr xq_ptr scale_ptr rowsum_ptr M:i32 K:i32 stride_xm:i32 "
                        "stride_qm:i32 ln_eps:f32",
    "quant_gemm_kernel": "a_ptr a_scale_ptr a_rowsum_ptr b_ptr b2_ptr b_scale_ptr b_offset_ptr bias_ptr c_ptr "
                         "M:i32 N:i32 K:i32 stride_am:i32 stride_bn:i32 stride_cm:i32",
    "w8a16_gemm_kernel": "a_ptr b_ptr b_scale_ptr bias_ptr c_ptr M:i32 N:i32 K:i32 stride_am:i32 stride_bn:i32 "
                         "stride_cm:i32",
    "tg_w8a16_small_kernel": "a_ptr b_ptr b_scale_ptr bias_ptr c_ptr M:i32 N:i32 K:i32 stride_am:i32 "
                             "stride_bn:i32 stride_cm:i32",
    "layernorm_kernel": "x_ptr gamma_ptr beta_ptr y_ptr M:i32 K:i32 stride_xm:i32 stride_ym:i32 ln_eps:f32",
    "mlp3_fused_kernel": "x_ptr gamma_ptr beta_ptr w1_ptr w1b_ptr s1_ptr o1_ptr b1_ptr w2_ptr w2b_ptr s2_ptr o2_ptr "
                         "b2_ptr w3_ptr w3b_ptr s3_ptr o3_ptr b3_ptr y_ptr M:i32 K0:i32 H1:i32 H2:i32 N:i32 "
                         "stride_xm:i32 stride_w1:i32 stride_w2:i32 stride_w3:i32 stride_ym:i32 ln_eps:f32",
}


def _check_quant_entry(k, fields):
    v = k["variant"]
    tiles = k.get("grid") == "tiles"
    extra = {"grid"} | ({"block_m", "block_n"} if tiles else set()) | ({"multiple_of_16"} if k["aligned16"] else set())
    # Programmatic dependent launch: every sm_90 kernel of a layer-by-layer step has it, the
    # one-kernel step (nothing before it in its graph) and sm_80 none.
    pdl = k["arch"] == "sm_90" and k["entry"] != "mlp3_fused_kernel"
    assert set(k) == fields | extra | ({"pdl"} if pdl else set()), v
    assert k.get("pdl", False) is pdl, v
    assert k["file"] == f"{k['arch']}/{k['variant']}.cubin"
    assert k["grid"] in ("rows", "tiles"), v
    assert k["dtype"] in ("f32", "f16", "bf16"), v
    assert k["block"] == [k["num_warps"] * 32, 1, 1]
    assert k["scratch"] == {"global": 0, "global_align": 1, "profile": 0}, v
    want = []
    for a in QUANT_ARGS[k["entry"]].split():
        name, _, kind = a.partition(":")
        want.append((name, kind or "ptr"))
    if k["source"] == "cuda":
        # The small-batch W8A16 kernel: static shared memory only, 16 output channels a block,
        # 8, 16 or 32 rows; only its weight rows must be 16-byte multiples.
        assert k["entry"] == "tg_w8a16_small_kernel" and k["shared"] == 0, v
        assert tiles and k["block_n"] == 16 and k["block_m"] in (8, 16, 32), v
        assert k["elements_per_block"] == k["block_m"] * k["block_n"], v
        assert v.endswith(f"_m{k['block_m']}") and v.startswith("quant_w8a16_"), v
        assert k["aligned16"] and k["multiple_of_16"] == ["stride_bn"], v
        assert [(p["name"], p["kind"]) for p in k["params"]] == want, v
        return
    assert k["source"] == "triton", v
    # Opting in above 48 KB works up to the device's limit: an sm_80 cubin also runs on 8.6/8.9
    # (99 KB); an sm_90 cubin only on 9.0 (227 KB).
    assert 0 <= k["shared"] <= (227 if k["arch"] == "sm_90" else 99) * 1024, v
    if k["entry"] == "mlp3_fused_kernel":
        # the fused 3-layer step: 16 tokens a program, one column tile as wide as the model's
        # widest layer (grid = ceil(M / 16)); weight rows padded to 16 bytes
        assert tiles and k["block_m"] == 16 and k["block_n"] in (32, 64) and v.endswith(f"_h{k['block_n']}"), v
        assert k["elements_per_block"] == 16 * k["block_n"] and k["dtype"] == "f32", v
        assert k["aligned16"] and k["multiple_of_16"] == ["stride_w1", "stride_w2", "stride_w3"], v
    elif tiles:
        assert k["elements_per_block"] == k["block_m"] * k["block_n"], v
        assert k["entry"] in ("quant_gemm_kernel", "w8a16_gemm_kernel"), v
        # the tile named last (before "_a16") is the one the plans' grids assume
        scheme = "w8a16" if k["entry"] == "w8a16_gemm_kernel" else v.split("_")[2]
        tile = v.removesuffix("_a16").rsplit("_", 1)[1]
        assert _gpu._TILE_M_N[(scheme, tile)] == (k["block_m"], k["block_n"]), v
        if k["aligned16"]:
            assert k["multiple_of_16"] == ["K", "stride_am", "stride_bn"], v
        # The int8 GEMMs are only built aligned (K is padded); W8A16 in both forms.
        assert k["aligned16"] == (k["entry"] == "quant_gemm_kernel" or v.endswith("_a16")), v
    else:
        assert k["elements_per_block"] == 1 and k["entry"] in ("act_quant_kernel", "layernorm_kernel"), v
        assert not k["aligned16"], v
    want += [("global_scratch", "ptr"), ("profile_scratch", "ptr")]
    assert [(p["name"], p["kind"]) for p in k["params"]] == want, v
    end = 0
    for p in k["params"]:
        assert p["size"] == {"ptr": 8, "i32": 4, "f32": 4}[p["kind"]]
        assert p["offset"] % p["size"] == 0 and p["offset"] >= end, (v, p)
        end = p["offset"] + p["size"]


def test_fresh_source_hashes_are_the_sources(fresh):
    raw = json.loads((fresh / "manifest.json").read_text())
    for k in raw["kernels"]:
        files = TRITON_SOURCES[k["family"]] if k["source"] == "triton" else CUDA_SOURCES[k["family"]]
        assert k["source_hash"] == hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()


def test_rebuild_is_deterministic(fresh, tmp_path):
    """A second build of the Triton kernels gives the same manifest (but "created") and cubins."""
    from tickgpu.kernels.build import build_bundle
    build_bundle(tmp_path, archs=["sm_90"], families=["surface"], log=lambda *_: None)
    first = {k["variant"]: k for k in json.loads((fresh / "manifest.json").read_text())["kernels"]
             if k["arch"] == "sm_90" and k["family"] == "surface"}
    second = json.loads((tmp_path / "manifest.json").read_text())["kernels"]
    assert {k["variant"]: k for k in second} == first
    for k in second:
        assert (tmp_path / k["file"]).read_bytes() == (fresh / k["file"]).read_bytes(), k["variant"]


# ---- the committed bundle --------------------------------------------------------------------

def test_committed_bundle_loads_and_matches_the_sources():
    m = mf.load_manifest(COMMITTED)
    families = {k.family for k in m.kernels}
    assert {"greeks", "surface", "quant", "resident_greeks", "noop", "scale"} <= families
    if LBR_CORE.is_file():
        assert "implied_vol" in families, ("csrc/cpu/lbr_core.h exists but the committed bundle has no "
                                           "implied_vol kernels: run `tickgpu build-kernels`")
    for k in m.kernels:
        files = TRITON_SOURCES[k.family] if k.source == "triton" else CUDA_SOURCES[k.family]
        if not all(f.is_file() for f in files):
            pytest.fail(f"{k.variant}: source {[str(f) for f in files]} missing")
        digest = hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()
        assert k.source_hash == digest, (f"{k.variant} ({k.arch}) was built from another version of "
                                         f"{[f.name for f in files]}: run `tickgpu build-kernels`")


def test_committed_pdl_flags_are_the_cubins():
    """A quant kernel marked "pdl" is launched before its predecessor finishes: safe only if its code
    waits. Every committed sm_90 quant cubin (Triton and CUDA C) has griddepcontrol exactly where
    the manifest says pdl (which entries say it: _check_quant_entry and the mock runtime's tests;
    below sm_90 the manifest refuses it)."""
    from tickgpu.kernels.build import dependency_control

    root = Path(__file__).resolve().parents[2] / "src" / "tickgpu" / "kernels" / "bundle"
    quant = [k for k in json.loads((root / "manifest.json").read_text())["kernels"] if k["family"] == "quant"]
    assert quant
    for k in quant:
        if k["arch"] == "sm_90":
            assert dependency_control((root / k["file"]).read_bytes()) is bool(k.get("pdl")), k["variant"]


def test_committed_bundle_matches_a_fresh_build(fresh):
    committed = json.loads((COMMITTED / "manifest.json").read_text())
    new = json.loads((fresh / "manifest.json").read_text())
    assert committed["compilers"]["triton"] == new["compilers"]["triton"], "rebuild with the pinned Triton"
    built = {k["family"] for k in new["kernels"]}
    old = {(k["arch"], k["variant"]): k for k in committed["kernels"] if k["family"] in built}
    fresh_k = {(k["arch"], k["variant"]): k for k in new["kernels"] if k["family"] in {k2["family"] for k2 in committed["kernels"]}}
    assert old == fresh_k, "committed manifest differs from a fresh build: run `tickgpu build-kernels`"
    same_nvcc = committed["compilers"]["nvcc"] == new["compilers"]["nvcc"]
    for key, k in old.items():
        if k["source"] == "triton" or same_nvcc:
            assert (COMMITTED / k["file"]).read_bytes() == (fresh / k["file"]).read_bytes(), key


# ---- validation of bad manifests ---------------------------------------------------------------

def _good(fresh):
    return json.loads((fresh / "manifest.json").read_text())


BREAKAGES = [
    ("missing field", lambda k: k.pop("entry"), "entry"),
    ("mistyped field", lambda k: k.update(num_warps="4"), "num_warps"),
    ("bool for an int", lambda k: k.update(shared=True), "shared"),
    ("block off num_warps", lambda k: k.update(block=[k["block"][0] * 2, 1, 1]), "block"),
    ("misaligned param", lambda k: k["params"][1].update(offset=k["params"][1]["offset"] + 2), "offset"),
    ("overlapping params", lambda k: k["params"][2].update(offset=k["params"][1]["offset"]), "offset"),
    ("wrong size", lambda k: k["params"][0].update(size=4), "size"),
    ("wrong order", lambda k: k["params"].reverse(), "params"),
    ("unknown kind", lambda k: k["params"][0].update(kind="f16"), "kind"),
    ("bad hash", lambda k: k.update(source_hash="abc"), "source_hash"),
    ("unknown family", lambda k: k.update(family="heston"), "family"),
    ("file elsewhere", lambda k: k.update(file="../x.cubin"), "file"),
    ("negative scratch", lambda k: k["scratch"].update(profile=-1), "scratch"),
    ("extra field", lambda k: k.update(registers=64), "registers"),
]


QUANT_BREAKAGES = [
    ("no grid rule", lambda k: k.pop("grid"), "grid"),
    ("unknown grid", lambda k: k.update(grid="blocks"), "grid"),
    ("tiles without a tile", lambda k: k.pop("block_n"), "block_n"),
    ("tile off elements_per_block", lambda k: k.update(block_m=k["block_m"] * 2), "elements_per_block"),
    ("promise on a pointer", lambda k: k.update(multiple_of_16=["a_ptr"]), "multiple_of_16"),
    ("promise unaligned", lambda k: k.update(aligned16=False), "multiple_of_16"),
    ("unknown entry", lambda k: k.update(entry="gemm2"), "entry"),
    ("params of another kernel", lambda k: k["params"].pop(2), "params"),
]


def _quant_tile_entry(raw):
    return next(k for k in raw["kernels"] if k["family"] == "quant" and k.get("grid") == "tiles" and k["aligned16"])


@pytest.mark.parametrize("what,breakage,field", QUANT_BREAKAGES, ids=[b[0] for b in QUANT_BREAKAGES])
def test_validate_checks_quant_launch_fields(fresh, what, breakage, field):
    raw = _good(fresh)
    k = _quant_tile_entry(raw)
    breakage(k)
    with pytest.raises(ValueError) as e:
        mf.validate(raw)
    assert k["variant"] in str(e.value) and field in str(e.value), str(e.value)


def test_quant_fields_stay_out_of_the_other_families(fresh):
    raw = _good(fresh)
    k = next(k for k in raw["kernels"] if k["family"] == "greeks")
    k["grid"] = "rows"
    with pytest.raises(ValueError, match="quant kernels only"):
        mf.validate(raw)
    raw = _good(fresh)
    next(k for k in raw["kernels"] if k["family"] == "greeks")["dtype"] = "f16"
    with pytest.raises(ValueError, match="f32 or f64"):
        mf.validate(raw)


def test_loaded_manifest_round_trips_the_quant_fields():
    m = mf.load_manifest(COMMITTED)
    raw = json.loads((COMMITTED / "manifest.json").read_text())
    assert mf._to_raw(m)["kernels"] == raw["kernels"]


@pytest.mark.parametrize("what,breakage,field", BREAKAGES, ids=[b[0] for b in BREAKAGES])
def test_validate_names_kernel_and_field(fresh, what, breakage, field):
    raw = _good(fresh)
    k = raw["kernels"][3]
    breakage(k)
    with pytest.raises(ValueError) as e:
        mf.validate(raw)
    assert k["variant"] in str(e.value) and field in str(e.value), str(e.value)


def test_validate_rejects_duplicates_and_missing_or_corrupt_cubins(fresh, tmp_path):
    raw = _good(fresh)
    raw["kernels"].append(copy.deepcopy(raw["kernels"][0]))
    with pytest.raises(ValueError, match="repeats"):
        mf.validate(raw)
    shutil.copytree(fresh, tmp_path / "b")
    victim = json.loads((tmp_path / "b" / "manifest.json").read_text())["kernels"][5]
    (tmp_path / "b" / victim["file"]).write_bytes(b"not a cubin")
    with pytest.raises(ValueError, match=f"{victim['variant']}.*ELF"):
        mf.load_manifest(tmp_path / "b")
    (tmp_path / "b" / victim["file"]).unlink()
    with pytest.raises(ValueError, match=f"{victim['variant']}.*no such file"):
        mf.load_manifest(tmp_path / "b")
    (tmp_path / "b" / "manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        mf.load_manifest(tmp_path / "b")


def test_manifest_module_needs_no_triton():
    code = "import sys, tickgpu.kernels.manifest; assert 'triton' not in sys.modules and 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_builder_refuses_bad_requests(tmp_path):
    pytest.importorskip("triton")
    from tickgpu.kernels.build import BuildError, build_bundle, main
    with pytest.raises(BuildError, match="unknown famil"):
        build_bundle(tmp_path, families=["heston"])
    with pytest.raises(BuildError, match="sm_NN"):
        build_bundle(tmp_path, archs=["hopper"], families=["greeks"])
    with pytest.raises(BuildError, match="lbr_core.h"):
        build_bundle(tmp_path, archs=["sm_90"], families=["implied_vol"], lbr_dir=tmp_path / "nowhere",
                     nvcc=_nvcc() or "nvcc")
    with pytest.raises(SystemExit) as e:    # a usage error, refused before anything compiles
        main(["--out", str(tmp_path), "--arch", "hopper", "--family", "greeks"])
    assert e.value.code == 2
