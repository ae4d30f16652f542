"""The launch configurations used where no tuned table has an entry (configs.py's GPU defaults),
checked as rules: against the H200 tuner's choices on the presets, and against the limits of
other GPUs (registers, shared memory per program). Their speed is measured by
``experiments/defaults.py`` (``experiments/results/<GPU>/defaults.csv``), not here."""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest

from bench import compiled
from warpdecode import _runtime, configs
from warpdecode.kernels import warp_pair
from warpdecode.warp import schedule_of

TABLE = json.loads(configs.tuned_file("NVIDIA H200").read_text())  # tuned on Triton 3.6
#: the ten layer shapes of experiments/defaults.py tuned on Triton 3.8 (warp decode's entries)
TABLE_38 = json.loads((Path(__file__).parents[1] / "experiments/results/NVIDIA_H200/tuned_shapes_cache_triton38.json")
                      .read_text())
SHAPES = {key: {k: int(v) for k, v in (kv.split("=") for kv in key.split(","))}
          for key in [*TABLE["warp"], *TABLE_38["warp"]]}
#: A100 (sm_80), H100/H200 (sm_90), B200 (sm_100), RTX 50 (sm_120): their launch limits
DEVICES = {f"sm_{arch}": limits for arch, limits in compiled.ARCH_LIMITS.items()}


@pytest.fixture
def on_a_gpu():
    """configs.py's non-interpreter branch (its GPU defaults), with no tuned table to answer first."""
    gpu = mock.Mock(INTERPRET=False, device_limits=lambda: dict(_runtime.HOPPER_LIMITS))
    with mock.patch.object(configs, "_runtime", gpu), mock.patch.object(configs, "_lookup", lambda *a: None):
        yield


def _sharing_rule_misses(table):
    """(buckets of T ≥ 2 where the default schedule is the tuner's pick, [(shape, T, the default's
    measured time over the pick's)] where it is not)."""
    agree, missed = 0, []
    for key, buckets in table["warp"].items():
        s = SHAPES[key]
        for t_max, cfg in buckets:
            if t_max < 2:
                continue
            rule = schedule_of(configs.warp_config(s["H"], s["I"], s["E"], s["K"], t_max))
            if rule == schedule_of(cfg):
                agree += 1
            else:
                m = cfg["measured_us"]
                missed.append((key, t_max, m[rule] / m[schedule_of(cfg)]))
    return agree, missed


def test_the_sharing_rule_picks_the_tuners_schedule(on_a_gpu):
    """The default warp schedule (grouped where the pairs outnumber the distinct experts by
    GROUPED_SHARING) is the Triton 3.6 tuner's pick in 23 of the 24 buckets of T ≥ 2 on the presets;
    the one it misses (Qwen3-30B-A3B at T = 8) the tuner decided by 2.5 %."""
    with mock.patch.object(configs, "GROUPED_SHARING", configs.GROUPED_SHARING_3D):
        agree, missed = _sharing_rule_misses(TABLE)
    assert agree == 23, missed
    assert all(loss < 1.03 for *_, loss in missed), missed


def test_the_k_first_sharing_rule_picks_the_triton_3_8_tuners_schedule(on_a_gpu):
    """Where the down tile is k-first (Triton ≥ 3.8), GROUPED_SHARING_K_FIRST: the 3.8 tuner's pick
    in 37 of the 40 buckets of T ≥ 2 on the ten layer shapes. Of the three it misses, Qwen1.5-MoE-A2.7B
    and deepseek-v2-lite at T = 8 (sharing 1.26 and 1.38) cost 1.096× and 1.005× the tuner's
    schedule on its first routing draw; at Mixtral T = 4 the grouped schedule took 0.93× the pair on
    that draw, and the tuner's two draws together kept the pair."""
    with mock.patch.object(configs, "GROUPED_SHARING", configs.GROUPED_SHARING_K_FIRST):
        agree, missed = _sharing_rule_misses(TABLE_38)
    assert agree == 37, missed
    assert all(loss < 1.10 for *_, loss in missed), missed


def test_one_token_never_takes_the_grouped_schedule(on_a_gpu):
    for s in SHAPES.values():
        assert "grouped" not in configs.warp_config(s["H"], s["I"], s["E"], s["K"], 1)


def test_gate_up_columns_per_step_are_the_tuners_at_one_token(on_a_gpu):
    """Where the compiler chains a lane's products into FMAs (Triton 3.6): 1024 or 2048 columns,
    whichever masks fewer in the last step, the 3.6 tuner's pick at T = 1 on all six presets
    (H = 2048, 2880, 4096, 7168)."""
    with mock.patch.object(warp_pair, "TREE_SUMS", False):
        for key, buckets in TABLE["warp"].items():
            s = SHAPES[key]
            assert configs.warp_config(s["H"], s["I"], s["E"], s["K"], 1)["gate_up"]["BLOCK_H"] == \
                buckets[0][1]["gate_up"]["BLOCK_H"], key


def _columns_per_lane(cfg) -> int:
    """Columns of a row one lane of a gate/up tile holds per step (a row spans up to warps / rows warps)."""
    return cfg["BLOCK_H"] // (32 * max(1, cfg["num_warps"] // cfg["BLOCK_I"]))


def test_gate_up_columns_per_lane_are_the_triton_3_8_tuners_at_one_token(on_a_gpu):
    """Where the compiler sums a lane's products as a tree (Triton ≥ 3.8): one warp over 512
    columns, 16 per lane, on every shape; the 3.8 tuner's T = 1 pick holds at most 16 columns of a
    row per lane on 9 of the ten layer shapes (Qwen3-235B-A22B: 8 × 1024 on 8 warps, 32)."""
    with mock.patch.object(warp_pair, "TREE_SUMS", True):
        for s in SHAPES.values():
            gate_up = configs.warp_config(s["H"], s["I"], s["E"], s["K"], 1)["gate_up"]
            assert (gate_up["BLOCK_I"], gate_up["BLOCK_H"], gate_up["num_warps"]) == (1, 512, 1), s
    picks = [_columns_per_lane(buckets[0][1]["gate_up"]) for buckets in TABLE_38["warp"].values()]
    assert len(picks) == 10 and sum(p <= 16 for p in picks) == 9, picks


def test_k_first_down_tiles_of_512_columns_take_a_warp_per_row(on_a_gpu):
    """Where the down tile is k-first, the default 512-column tiles are 8 rows on 8 warps: each thread
    then holds at most warp_pair.K_FIRST_MAX_BYTES_PER_THREAD of a 16-bit step, so the tile keeps the
    k-first form (``warp_pair.down_form``); the 3.6 rule's 8 × 512 on 4 warps would run per slot."""
    for k_first in (False, True):
        with mock.patch.object(warp_pair, "K_FIRST", k_first):
            for s in SHAPES.values():
                down = configs.default_down(s["H"], s["I"], s["K"])
                if k_first and down["BLOCK_I"] == 512:
                    assert (down["BLOCK_H"], down["num_warps"]) == (8, 8), s
                assert warp_pair.down_form(down, s["K"], 2) == (False, k_first), (s, down)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("elem", [1, 2, 4])
@pytest.mark.parametrize("T", [1, 16, 64, 256, 4096])
def test_expert_defaults_fit_the_device(device, elem, T):
    """Every default GEMM tile keeps its FP32 accumulators within what the device's tensor cores
    leave a thread (ACC_REGS_PER_THREAD with wgmma or tcgen05, half with mma.sync, a quarter for
    FP32 operands on FMAs, which also keep to 64 rows, eight warps, 32-column K steps) and its
    pipelined stages within the device's shared memory per program."""
    limits = DEVICES[device]
    gpu = mock.Mock(INTERPRET=False, device_limits=lambda: dict(limits))
    with mock.patch.object(configs, "_runtime", gpu):
        for s in [*SHAPES.values(), dict(H=6144, I=10752, E=16, K=4), dict(H=2880, I=1408, E=61, K=6)]:
            cfg = configs.default_expert(s["H"], s["I"], s["E"], s["K"], T, elem=elem)
            for gemm, accumulators in (("gate_up", 2), ("down", 1)):
                t = cfg[gemm]
                threads = 32 * t["num_warps"]
                acc = accumulators * cfg["BLOCK_M"] * t["BLOCK_N"] / threads
                assert acc <= configs.acc_regs_per_thread(limits["arch"], elem), (s, gemm, cfg)
                assert acc <= configs.ACC_REGS_PER_THREAD // (4 if elem == 4 else 1)
                stage = (cfg["BLOCK_M"] * t["BLOCK_K"] + accumulators * t["BLOCK_K"] * t["BLOCK_N"]) * elem
                assert stage * t["num_stages"] <= limits["shared_per_block"], (device, s, gemm, cfg)
                assert t["HALF_M"] == (cfg["BLOCK_M"] >= 32)
                if elem == 4:
                    assert cfg["BLOCK_M"] <= 64 and t["num_warps"] == 8 and t["BLOCK_K"] <= 32, (s, gemm, cfg)


def test_mma_sync_halves_the_accumulators():
    """Where mma.sync takes both operands into registers (sm_80, sm_120), half the accumulators of
    wgmma (sm_90) and tcgen05 (sm_100); FP32 operands on FMAs, a quarter everywhere."""
    assert {a: configs.acc_regs_per_thread(a, 2) for a in compiled.ARCH_LIMITS} == {80: 64, 90: 128, 100: 128,
                                                                                  120: 64}
    assert {configs.acc_regs_per_thread(a, 4) for a in compiled.ARCH_LIMITS} == {32}


def test_triton_before_3_8_runs_sm100_fp8_gate_up_untransposed():
    """Triton 3.6's pipeliner rejects the FP8 gate/up GEMM transposed for sm_100a (any stage count):
    there the defaults keep SWAP_AB for the down GEMM only; from 3.8 on, for both."""
    gpu = mock.Mock(INTERPRET=False, device_limits=lambda: dict(compiled.ARCH_LIMITS[100]))
    for fixed in (False, True):
        with mock.patch.object(configs, "_runtime", gpu), \
                mock.patch.object(configs, "SWAP_FP8_GATE_UP_SM100", fixed):
            cfg = configs.default_expert(2048, 768, 128, 8, 1, fp8=True)
            assert cfg["gate_up"].get("SWAP_AB", False) is fixed and cfg["down"]["SWAP_AB"] is True
            assert configs.default_expert(2048, 768, 128, 8, 1)["gate_up"]["SWAP_AB"] is True


@pytest.mark.parametrize("T", [1, 8])
def test_decode_tiles_are_transposed_except_for_fp8_weights_with_16_bit_activations(T):
    """SWAP_AB where most experts see at most one row: bf16 and w8a8 tiles transposed, FP8 weights with
    bf16 activations (both formats) not, since their widened e4m3 tiles run faster untransposed (the
    tuners' swap steps, Qwen3-30B-A3B block128: results/NVIDIA_H200/logs/de03f50/tune.log)."""
    def swapped(**kw):
        cfg = configs.default_expert(2048, 768, 128, 8, T, shared_per_block=232448, **kw)
        return cfg["gate_up"].get("SWAP_AB", False), cfg["down"].get("SWAP_AB", False)

    assert swapped() == swapped(fp8=True, group_k=128) == (True, True)
    assert swapped(group_k=128) == swapped(group_k=32) == (False, False)


def test_few_wide_experts_keep_deep_k_steps_and_four_stages_at_128_columns():
    """16-bit operands on Hopper's shared memory: a 16-row gate/up tile keeps its 128-deep K step on
    three stages rather than 64 on four, and a 256-column tile narrows to 128 before it gives up a
    stage (experiments/results/NVIDIA_H200/expert_defaults.csv: 0.96-0.98x at T = 4-64, 0.85-0.93x at T = 256)."""
    def tile(T, **kw):
        g = configs.default_expert(4096, 6400, 16, 2, T, shared_per_block=232448, **kw)["gate_up"]
        return g["BLOCK_N"], g["BLOCK_K"], g["num_stages"]

    assert tile(8) == (128, 128, 3) and tile(256) == (128, 64, 4)
    assert tile(8, fp8=True) == (128, 64, 4)  # measured on 16-bit operands only: FP8 keeps the older fit


def test_expert_block_m_follows_the_pairs_per_expert():
    """Twice the mean pairs an expert sees, a power of two in [16, 128]: not T alone."""
    bm = {(E, K, T): configs.default_expert(2048, 768, E, K, T, shared_per_block=232448)["BLOCK_M"]
          for E, K, T in [(128, 8, 1), (128, 8, 64), (128, 8, 256), (8, 2, 64), (8, 2, 256), (8, 2, 4096)]}
    assert bm == {(128, 8, 1): 16, (128, 8, 64): 16, (128, 8, 256): 32, (8, 2, 64): 32, (8, 2, 256): 128,
                  (8, 2, 4096): 128}


def test_fp8_weights_with_16_bit_activations_stop_at_32_row_tiles_where_the_rule_gives_64():
    """FP8 weights, bf16 activations (fp16 rows): 64-row M tiles become 32, grouped where an expert's rows span
    two; 128-row ones stay (their 32-row form spills), as do w8a8's and 16-bit weights' tiles."""
    def tiles(E, K, T, **kw):
        c = configs.default_expert(2048, 1024, E, K, T, shared_per_block=232448, **kw)
        return c["BLOCK_M"], c["gate_up"]["GROUP_M"], c["down"]["GROUP_M"]

    assert tiles(64, 8, 256, group_k=128) == (32, 8, 8) and tiles(64, 8, 256, group_k=32) == (32, 8, 8)
    assert tiles(64, 8, 128, group_k=128) == (32, 1, 1)  # 16 rows on average: one tile holds an expert's
    assert tiles(64, 8, 256) == (64, 1, 1) and tiles(64, 8, 256, fp8=True, group_k=128) == (64, 1, 1)
    assert tiles(8, 2, 256, group_k=128) == (128, 1, 1)


@pytest.mark.parametrize("T", [1, 2, 8, 256])
def test_fp8_defaults_step_within_one_activation_scale(T):
    """FP8 activations carry one scale per 128 columns (expert.quantize): no K step may span two."""
    for s in SHAPES.values():
        cfg = configs.default_expert(s["H"], s["I"], s["E"], s["K"], T, fp8=True, shared_per_block=232448)
        assert all(cfg[g]["BLOCK_K"] <= 128 for g in ("gate_up", "down")), (s, cfg)
