"""Hashes of the PTX (debug sections, .loc and .file lines stripped) of every tuned warp-decode
kernel, compiled for sm_90a without a GPU: the pair's gate/up and down kernels of every tuned
bucket, the grouped kernels of every tuned bucket and their default configs, and the persistent
kernel's default config per tuned shape (``bench/persistent.py``; in an older checkout, the package's);
and the FP8-weight pair in both formats at each tuned shape (its launches as ``warpdecode.warp``
makes them on the H200, recorded by ``compiled.record_launches``: its tiles and its down form are
the launcher's). Run it in two checkouts and diff the output to show that a change leaves the
shipped GPU code as it was:

    git worktree add /tmp/before <commit>
    (cd /tmp/before && TRITON_INTERPRET=0 PYTHONPATH=. python /path/to/tools/ptx_hashes.py) > before.txt
    TRITON_INTERPRET=0 PYTHONPATH=. python tools/ptx_hashes.py > after.txt && diff before.txt after.txt

The table and the kernels are those of the checkout on PYTHONPATH. A checkout whose warp kernels
all live in ``kernels/warp.py`` is read too, and where its kernels take ``EVICT``, ``LEAN`` or
``PAIR_FASTEST``, those take the value that checkout's launcher passes for the config.
"""

import hashlib
import importlib
import json
import re
from pathlib import Path

import torch

import warpdecode
from bench import compiled
from warpdecode import configs

try:
    from warpdecode.kernels import warp_grouped as kg
    from warpdecode.kernels import warp_pair as kp
except ImportError:  # a checkout with every warp kernel in kernels/warp.py
    from warpdecode.kernels import warp as kp

    kg = kp
try:  # the persistent kernel and its default beside the package
    from bench import persistent as kf
    from bench.persistent import default_fused
except ImportError:  # a checkout with them in the package
    kf = kp if kg is kp else importlib.import_module("warpdecode.kernels.warp_persistent")
    default_fused = configs.default_fused

TABLE = Path(warpdecode.__file__).parent / "tuned" / "NVIDIA_H200.json"


def code_of(ptx: str) -> str:
    """The PTX without its debug sections, .loc/.file lines and the labels only the debug sections
    name (``$L__tmpN:``, one per inlined call's scope): source line numbers, file names and how the
    source is split into functions move."""
    out, debug = [], False
    for line in ptx.splitlines():
        s = line.strip()
        debug = debug or s.startswith(".section")
        if not (debug or s.startswith((".loc", ".file")) or re.fullmatch(r"\$L__tmp\d+:", s)):
            out.append(line)
    return "\n".join(out)


def knobs(kernel, cfg: dict, K: int = 1, persistent: bool = False) -> dict:
    """The removed knobs, where ``kernel`` still has them, at what the launcher passed for ``cfg``;
    and the down tile's form (``PER_SLOT``, ``K_FIRST``: ``warp_pair.down_form`` for bf16 weights
    and K experts, where the checkout has it) and gate/up's slices (``SUB_H``), where the kernel has them."""
    old = {"EVICT": cfg.get("evict", "evict_first"), "LEAN": cfg.get("lean", False), "PAIR_FASTEST": True}
    if hasattr(kp, "down_form") and "BLOCK_H" in cfg:
        old["PER_SLOT"], old["K_FIRST"] = kp.down_form(cfg, K, 2, persistent=persistent)
    else:
        old["PER_SLOT"] = getattr(kp, "PER_SLOT", False)
    if "SUB_H" in kernel.arg_names:
        old["SUB_H"] = kp.gate_up_slice(cfg)
    return {k: v for k, v in old.items() if k in kernel.arg_names}


def taken(kernel, **args) -> dict:
    """Those of ``args`` that ``kernel`` takes (the id guard's E and routing weights, in a checkout
    whose kernels have them)."""
    return {k: v for k, v in args.items() if k in kernel.arg_names}


def pair_jobs(key, H, I, E, K, T, cfg):  # noqa: E741
    bf, i32, f32 = torch.bfloat16, torch.int32, torch.float32
    g, d = cfg["gate_up"], cfg["down"]
    return [
        (f"{key} T<={T} gate/up", compiled.job(
            kp.warp_gate_up_kernel,
            dict(x_ptr=bf, w13_ptr=bf, topk_ids_ptr=i32, **taken(kp.warp_gate_up_kernel, topk_weights_ptr=f32),
                 act_ptr=f32, H=H, I=I, **taken(kp.warp_gate_up_kernel, E=E), NUM_PAIRS=T * K, K=K, stride_xt=H,
                 stride_we=2 * I * H, stride_wr=H, stride_at=I),
            dict(BLOCK_I=g["BLOCK_I"], BLOCK_H=g["BLOCK_H"], USE_PDL=True, **knobs(kp.warp_gate_up_kernel, g)),
            num_warps=g["num_warps"], num_stages=g["num_stages"])),
        (f"{key} T<={T} down", compiled.job(
            kp.warp_down_kernel,
            dict(act_ptr=f32, w2_ptr=bf, topk_ids_ptr=i32, topk_weights_ptr=f32, y_ptr=bf, H=H, I=I,
                 **taken(kp.warp_down_kernel, E=E), T=T, stride_at=I, stride_we=H * I, stride_wr=I, stride_yt=H),
            dict(K=K, K_PAD=1 << (K - 1).bit_length(), BLOCK_H=d["BLOCK_H"], BLOCK_I=d["BLOCK_I"], USE_PDL=True,
                 **knobs(kp.warp_down_kernel, d, K)), num_warps=d["num_warps"], num_stages=d["num_stages"])),
    ]


def grouped_jobs(label, H, I, E, K, T, gu, dn, wide=False):  # noqa: E741
    """The grouped kernels as warpdecode.warp launches them: bf16 weights with the FP32 intermediate
    as three bf16 terms, or (``wide``) FP32 weights and one FP32 term."""
    w, i32, f32 = (torch.float32 if wide else torch.bfloat16), torch.int32, torch.float32
    terms, act = (1, f32) if wide else (3, torch.bfloat16)
    k_pad, t_pad = 1 << (K - 1).bit_length(), 16
    return [
        (f"{label} grouped gate/up", compiled.job(
            kg.warp_gate_up_grouped_kernel,
            dict(x_ptr=w, w13_ptr=w, topk_ids_ptr=i32, topk_weights_ptr=f32, act_ptr=act, H=H, I=I, T=T, E=E,
                 stride_xt=H, stride_we=2 * I * H, stride_wr=H, stride_at=I, stride_term=T * K * I),
            dict(K=K, K_PAD=k_pad, T_PAD=t_pad, TERMS=terms, BLOCK_I=gu["BLOCK_I"], BLOCK_H=gu["BLOCK_H"],
                 USE_PDL=True, WIDEN=False, **knobs(kg.warp_gate_up_grouped_kernel, gu)),
            num_warps=gu["num_warps"], num_stages=gu["num_stages"])),
        (f"{label} grouped down", compiled.job(
            kg.warp_down_grouped_kernel,
            dict(act_ptr=act, w2_ptr=w, topk_ids_ptr=i32, **taken(kg.warp_down_grouped_kernel, topk_weights_ptr=f32),
                 y_ptr=w, sums_ptr=f32, arrived_ptr=i32, H=H, I=I, T=T, E=E, stride_at=I, stride_term=T * K * I,
                 stride_we=H * I, stride_wr=I, stride_yt=H),
            dict(K=K, K_PAD=k_pad, T_PAD=t_pad, TERMS=terms, BLOCK_H=dn["BLOCK_H"], BLOCK_I=dn["BLOCK_I"],
                 WIDEN=False, **knobs(kg.warp_down_grouped_kernel, dn)),
            num_warps=dn["num_warps"], num_stages=dn["num_stages"])),
    ]


def fused_job(label, H, I, E, K, T, cfg):  # noqa: E741
    bf, i32, f32 = torch.bfloat16, torch.int32, torch.float32
    gu, dn = cfg["gate_up"], cfg["down"]
    return [(f"{label} fused", compiled.job(
        kf.warp_fused_kernel,
        dict(x_ptr=bf, w13_ptr=bf, w2_ptr=bf, topk_ids_ptr=i32, topk_weights_ptr=f32, act_ptr=f32, y_ptr=bf,
             barrier_ptr=i32, H=H, I=I, **taken(kf.warp_fused_kernel, E=E), T=T, stride_xt=H, stride_w13e=2 * I * H,
             stride_w13r=H, stride_w2e=H * I, stride_w2r=I, stride_at=I, stride_yt=H),
        dict(K=K, K_PAD=1 << (K - 1).bit_length(), GU_BLOCK_I=gu["BLOCK_I"], GU_BLOCK_H=gu["BLOCK_H"],
             DN_BLOCK_H=dn["BLOCK_H"], DN_BLOCK_I=dn["BLOCK_I"], PHASE=0, MAX_SPINS=1 << 20,
             **knobs(kf.warp_fused_kernel, {**dn, "num_warps": cfg["num_warps"]}, K, persistent=True)),
        num_warps=cfg["num_warps"], num_stages=1))]


def fp8_jobs(key, H, I, E, K):  # noqa: E741
    """The FP8-weight pair at T = 1 in both formats, as the launcher records it (one compiled kernel
    serves every T)."""
    shape = warpdecode.MoEShape("tuned", H=H, I=I, E=E, K=K)
    return [(f"{key} {fmt} {ln.kernel}", ln.job) for fmt in ("block128", "mxfp8")
            for ln in compiled.record_launches("warp", shape, 1, gpu_name=TABLE.stem.replace("_", " "), weights=fmt)]


def main():
    jobs = []
    for key, buckets in sorted(json.loads(TABLE.read_text())["warp"].items()):
        s = {k: int(v) for k, v in (kv.split("=") for kv in key.split(","))}
        H, I, E, K = s["H"], s["I"], s["E"], s["K"]  # noqa: E741
        for T, cfg in buckets:
            jobs += pair_jobs(key, H, I, E, K, T, cfg)
            if "grouped" in cfg:
                jobs += grouped_jobs(f"{key} T<={T}", H, I, E, K, T, cfg["grouped"]["gate_up"],
                                     cfg["grouped"]["down"])
            if "fused" in cfg:
                jobs += fused_job(f"{key} T<={T} tuned", H, I, E, K, T, cfg["fused"])
        jobs += grouped_jobs(f"{key} default", H, I, E, K, 16, configs.default_grouped(),
                             configs.default_grouped_down())
        jobs += grouped_jobs(f"{key} default wide", H, I, E, K, 16, configs.default_grouped(True),
                             configs.default_grouped_down(True), wide=True)
        jobs += fused_job(f"{key} default", H, I, E, K, 16, default_fused(H, I, K))
        jobs += fp8_jobs(key, H, I, E, K)
    names = [n for n, _ in jobs]
    for name, c in zip(names, compiled.compile_many([j for _, j in jobs]), strict=True):
        print(name, hashlib.sha1(code_of(c.asm["ptx"]).encode()).hexdigest()[:16])


if __name__ == "__main__":
    main()
