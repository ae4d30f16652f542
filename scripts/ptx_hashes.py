"""Hashes of the PTX (debug line info stripped) of every tuned warp-decode kernel, compiled for
sm_90a without a GPU. Run it in two checkouts and diff the output to show that a change leaves
the shipped GPU code as it was, e.g. after adding a constexpr knob whose default keeps the old path:

    git worktree add /tmp/before <commit>
    (cd /tmp/before && TRITON_INTERPRET=0 PYTHONPATH=. python /path/to/scripts/ptx_hashes.py) > before.txt
    TRITON_INTERPRET=0 PYTHONPATH=. python scripts/ptx_hashes.py > after.txt && diff before.txt after.txt

Knobs a checkout's kernels do not have yet are left out of the launch, the others take the
values the launchers pass by default.
"""

import hashlib
import json
from pathlib import Path

import torch

from warpdecode import compiled
from warpdecode.kernels import warp as kw

TABLE = Path(__file__).resolve().parents[1] / "warpdecode" / "tuned" / "NVIDIA_H200.json"
DEFAULT_KNOBS = {"PAIR_FASTEST": True, "LEAN": False}


def code_of(ptx: str) -> str:
    """The PTX without its debug sections and .loc/.file lines (source line numbers move)."""
    out, debug = [], False
    for line in ptx.splitlines():
        s = line.strip()
        debug = debug or s.startswith(".section")
        if not (debug or s.startswith((".loc", ".file"))):
            out.append(line)
    return "\n".join(out)


def main():
    bf, i32, f32 = torch.bfloat16, torch.int32, torch.float32
    jobs, names = [], []
    for key, buckets in sorted(json.loads(TABLE.read_text())["warp"].items()):
        s = {k: int(v) for k, v in (kv.split("=") for kv in key.split(","))}
        H, I, K = s["H"], s["I"], s["K"]  # noqa: E741
        for T, cfg in buckets:
            g, d = cfg["gate_up"], cfg["down"]
            knobs = {k: v for k, v in DEFAULT_KNOBS.items() if k in kw.warp_gate_up_kernel.arg_names}
            jobs.append(compiled.job(
                kw.warp_gate_up_kernel,
                dict(x_ptr=bf, w13_ptr=bf, topk_ids_ptr=i32, act_ptr=f32, H=H, I=I, NUM_PAIRS=T * K, K=K, stride_xt=H,
                     stride_we=2 * I * H, stride_wr=H, stride_at=I),
                dict(BLOCK_I=g["BLOCK_I"], BLOCK_H=g["BLOCK_H"], USE_PDL=True, EVICT=g.get("evict", "evict_first"),
                     **knobs), num_warps=g["num_warps"], num_stages=g["num_stages"]))
            jobs.append(compiled.job(
                kw.warp_down_kernel,
                dict(act_ptr=f32, w2_ptr=bf, topk_ids_ptr=i32, topk_weights_ptr=f32, y_ptr=bf, H=H, I=I, T=T,
                     stride_at=I, stride_we=H * I, stride_wr=I, stride_yt=H),
                dict(K=K, K_PAD=1 << (K - 1).bit_length(), BLOCK_H=d["BLOCK_H"], BLOCK_I=d["BLOCK_I"], USE_PDL=True,
                     EVICT=d.get("evict", "evict_first")), num_warps=d["num_warps"], num_stages=d["num_stages"]))
            names += [f"{key} T<={T} gate/up", f"{key} T<={T} down"]
    for name, c in zip(names, compiled.compile_many(jobs), strict=True):
        print(name, hashlib.sha1(code_of(c.asm["ptx"]).encode()).hexdigest()[:16])


if __name__ == "__main__":
    main()
