"""Experiment: where the grouped schedule's time goes, kernel by kernel, against the tuned pair.

    python scripts/grouped_parts.py [--presets mixtral-8x7b olmoe-1b-7b] [--T 8]

Times, per preset and T, over the layer copies (weights from HBM): the tuned pair's gate/up kernel
alone and the whole pair; the grouped gate/up kernel alone for a set of tiles; the grouped down
kernel alone (on the intermediate the gate/up kernel wrote) for a set of tiles, with its
registers, shared memory and programs per SM; and a hybrid: the best grouped gate/up followed by
the tuned pair's down kernel. Prints one line per measurement (the log is the result).
"""

import argparse
import itertools
from functools import partial

import torch
import triton

import warpdecode as wd
from warpdecode import warp as wp
from warpdecode.bench.timing import read_ceiling
from warpdecode.bench.tune import _compiled_for, _layer_copies, _over_layers, _time, _warp_inputs
from warpdecode.bench.workload import bytes_needed, make_inputs
from warpdecode.configs import warp_config
from warpdecode.kernels import warp as kw


def grouped_gate_up(x, w13, ids, cfg):
    T, H = x.shape
    E, two_i, _ = w13.shape
    I, K = two_i // 2, ids.shape[1]  # noqa: E741
    act = torch.empty(T * K, I, device=x.device)
    kw.warp_gate_up_grouped_kernel[(E * triton.cdiv(I, cfg["BLOCK_I"]),)](
        x, w13, ids, act, H, I, T, E, x.stride(0), w13.stride(0), w13.stride(1), act.stride(0),
        K=K, K_PAD=triton.next_power_of_2(K), T_PAD=16, BLOCK_I=cfg["BLOCK_I"], BLOCK_H=cfg["BLOCK_H"],
        USE_PDL=False, EVICT="evict_first", WIDEN=False, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return act


def grouped_down(act, w2, ids, tw, cfg):
    E, H, I = w2.shape  # noqa: E741
    T, K = ids.shape
    y = torch.empty(T, H, device=act.device, dtype=torch.bfloat16)
    kw.warp_down_grouped_kernel[(triton.cdiv(H, cfg["BLOCK_H"]),)](
        act, w2, ids, tw, y, H, I, T, E, act.stride(0), w2.stride(0), w2.stride(1), y.stride(0),
        K=K, K_PAD=triton.next_power_of_2(K), T_PAD=16, BLOCK_H=cfg["BLOCK_H"], BLOCK_I=cfg["BLOCK_I"],
        USE_PDL=False, EVICT="evict_first", WIDEN=False, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return y


def pair_step(x, w13, w2, ids, tw, c_gu, c_dn, gate_up=None):
    act = gate_up(x, w13, ids, c_gu) if gate_up else wp.warp_gate_up(x, w13, ids, c_gu)
    return wp.warp_down(act, w2, ids, tw, c_dn, torch.bfloat16)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--presets", nargs="+", default=["mixtral-8x7b", "olmoe-1b-7b"])
    p.add_argument("--T", type=int, nargs="+", default=[8])
    args = p.parse_args()
    ceiling = read_ceiling()
    print(f"read ceiling {ceiling:.3f} TB/s")
    for name in args.presets:
        shape = wd.get_preset(name)
        L, w13s, w2s = _layer_copies(shape)
        for T in args.T:
            xs, ids, tws = _warp_inputs(shape, T, L)
            floor = sum(bytes_needed(shape, i) for i in make_inputs(shape, T, L, seed=3000 + T)) / L / (ceiling * 1e6)
            cfg = warp_config(shape.H, shape.I, shape.E, shape.K, T)
            gu = _time(_over_layers(partial(wp.warp_gate_up, cfg=cfg["gate_up"]), xs, w13s, ids), 30) / L
            step = partial(pair_step, c_gu=cfg["gate_up"], c_dn=cfg["down"])
            pair = _time(_over_layers(step, xs, w13s, w2s, ids, tws), 30) / L
            print(f"{name} T={T} floor {floor:.1f} us | pair gate/up {gu:.1f} us, pair {pair:.1f} us "
                  f"({floor / pair:.0%})")
            best = None
            for r, c, w, st in itertools.product([64, 128], [128, 256], [4, 8], [3, 4]):
                c_gu = {"BLOCK_I": r, "BLOCK_H": c, "num_warps": w, "num_stages": st}
                t = _time(_over_layers(partial(grouped_gate_up, cfg=c_gu), xs, w13s, ids), 30)
                if t is not None:
                    print(f"  grouped gate/up {t / L:8.1f} us {c_gu}")
                    best = min(best or (t, c_gu), (t, c_gu), key=lambda z: z[0])
            print(f"  best grouped gate/up {best[0] / L:.1f} us {best[1]}")
            acts = [grouped_gate_up(x, w13, i, best[1]) for x, w13, i in zip(xs, w13s, ids, strict=True)]
            for r, c, w, st in itertools.product([16, 32, 64], [128, 256, 512], [4, 8], [2, 4]):
                c_dn = {"BLOCK_H": r, "BLOCK_I": c, "num_warps": w, "num_stages": st}
                before = set(_compiled_for(kw.warp_down_grouped_kernel))
                t = _time(_over_layers(partial(grouped_down, cfg=c_dn), acts, w2s, ids, tws), 30)
                new = [k for key, k in _compiled_for(kw.warp_down_grouped_kernel).items() if key not in before]
                info = f"regs {new[0].n_regs} spills {new[0].n_spills} smem {new[0].metadata.shared}" if new else ""
                if t is not None:
                    print(f"  grouped down {t / L:8.1f} us {c_dn} {info}")
            step = partial(pair_step, c_gu=best[1], c_dn=cfg["down"], gate_up=grouped_gate_up)
            hyb = _time(_over_layers(step, xs, w13s, w2s, ids, tws), 30) / L
            print(f"  hybrid: grouped gate/up + pair down {hyb:.1f} us ({floor / hyb:.0%}); pair {pair:.1f} us")


if __name__ == "__main__":
    main()
