#!/usr/bin/env bash
# The GPU work, as stages run in order, logs under $OUT:
#   bash tools/gpu.sh check tune bench
#   env       GPU, driver, versions
#   check     poisoned correctness on every preset + compute-sanitizer memcheck + GPU tests
#   pytest    the GPU tests alone (tests marked gpu), then the expert stage tests compiled for the GPU (185 s on
#             triton 3.6; on 3.9, whose compiles are slower, 388 of 460 tests in 400 s: TIMEOUT_PYTEST=580, or
#             PYTEST_ARGS="-n 8" to compile in eight pytest-xdist workers, which the image has; each worker holds a
#             preset's weights, so on an H100's 78 GiB more than 3 workers run the large presets out of memory);
#             the compiled kernels stay in ~/.triton/cache while the machine is warm, so a second call of the stage
#             to the same machine compiles only what the first did not reach, and finishes the suite
#   lab       experiments/reads.py --version stream: the read ceiling of one decode-sized kernel (6 MB … 600 MB)
#   variants  experiments/warp_schedule.py --version 5: warp decode's cache knobs against the tuned configs
#   ordered   experiments/one_launch.py --version 8: the one-launch experiment (v8) against the tuned pair
#   gateup    experiments/gate_up.py --version ladder: a read, then the gate/up kernel's ingredients one by one
#   preload   experiments/warp_down.py --version 13: the down kernel with its whole w2 tile loaded before the wait (v13)
#   tiles     experiments/expert_path.py --version tiles: the expert path's GEMMs at large T over a wider set of tiles
#   expdl     experiments/expert_path.py --version pdl: the expert path's four launches chained with PDL, against without
#   chunks    experiments/warp_down.py --version 14: the warp down kernel by chunks of I, each started when its part of the intermediate exists (v14)
#   halfm     experiments/expert_path.py --version half_m: the expert GEMMs with HALF_M (half-height tiles on padding), against without
#   tma       experiments/warp_down.py --version 15: the warp down kernel with its whole w2 tile in flight into shared memory before the wait (v15, Gluon)
#   dladder   experiments/warp_down.py --version ladder: a read, then the down kernel's ingredients one by one
#   align     experiments/expert_path.py --version align: align's kernel four ways (ALIGN_ARGS)
#   swapab    experiments/expert_path.py --version swap_ab: the expert GEMMs with SWAP_AB (the tile transposed on the tensor cores) against the tuned tiles
#   xbound    experiments/expert_path.py --version bound: the expert path at T = 32 … 256 against the same launches with no
#             math and one read of its bytes (XBOUND_ARGS; at most 3 minutes)
#   draws     experiments/warp_schedule.py --version draws: the tuned schedule choice (pair, grouped, expert) on several routing draws
#   order     experiments/one_launch.py --version 16: one launch, each down program taking its token's experts as gate/up finishes them (v16)
#   down2d    experiments/warp_down.py --version 17: the shipped K 2-D down tiles against the 3-D tile they replace (DOWN2D_ARGS)
#   kfirst    experiments/warp_down.py --version 18: the [K, rows, columns] down tile against the shipped form (KFIRST_ARGS)
#   shapes    tune the real layer shapes that are not presets into a fresh per-user cache (TUNE_SHAPES: "H I E K;…"),
#             then experiments/defaults.py on them: defaults against tuned, auto against the faster path
#   bound     experiments/reads.py --version bound: a read of a T = 1 call's bytes with each way to wait after it, in one launch or two (BOUND_ARGS)
#   profile   experiments/profiling.py --version pair under Nsight Compute: the missed targets' kernels, and tile reads of their bytes
#   memtest   the GPU tests at the odd edge shapes under compute-sanitizer memcheck (MEMTEST_K)
#   fp8       FP8 weights (issue 23): tests/test_fp8*.py on the GPU, then python -m bench.fp8 in
#             four runs (the bar's warp figures, auto across T, accuracy, error across FP8_LAYERS model
#             layers), each under its own limit; prints the bar's figures; results/<GPU>/fp8_speed.csv,
#             fp8_accuracy.csv, fp8_layers.csv, fp8_tuned.json to $OUT
#             (FP8_PRESETS, FP8_LESSON=1 adds the w8a8/MXFP8 expert-path rows, FP8_RUNS picks among
#             "pytest warp auto accuracy layers"; the warp run starts fp8_speed.csv afresh); at most about 9 minutes,
#             the tests up to 4 (63: 111 s on the H100 with their kernels compiled; a fresh
#             machine did not finish them in 200 s)
#   compiled  the torch.compile GPU tests: warpdecode::moe and warpdecode::moe_fp8 (FP8 weights) compiled
#             with Inductor and CUDA graphs (mode="reduce-overhead", fullgraph) against eager, and the
#             compiled tiny Qwen3-MoE's generate; log compiled.log (about 3 minutes)
#   fp8tiles  experiments/fp8_warp.py --version tiles: the FP8 pair at its default tiles, with the integer
#             dequantization, at gate/up and down tiles of several rows, and the bf16 pair, T = 1 2 4 8 on
#             qwen3-30b-a3b olmoe-1b-7b mixtral-8x7b against the FP8 bytes' floor (FP8TILES_ARGS); about 3 minutes
#   fp8bound  experiments/fp8_warp.py --version bound: the FP8 pair (defaults), its two launches with no math and
#             one read of its FP8 bytes, Qwen3-30B-A3B T = 1 2 4 8 and T = 1 on the other FP8 presets (FP8BOUND_ARGS);
#             about 2 minutes
#   f16rows   experiments/fp8_expert.py --version rows: the weight-only FP8 expert path with its activations
#             re-encoded once in fp16 (1x128 power-of-two scales) against the shipped weight-only path, w8a8
#             and auto on the same block128 bytes (F16ROWS_ARGS: --presets, --T); about 4 minutes
#   fp8mma    experiments/fp8_mma.py --version mma: the FP8 pair on tensor cores (e4m3 → fp16, tl.dot against the
#             activations scaled per 128 columns into fp16) at four tiles against the shipped FP8 pair and the bf16
#             pair, T = 1 2 4 8 on qwen3-30b-a3b olmoe-1b-7b against the FP8 bytes' floor (FP8MMA_ARGS); about 4 minutes
#   xdefaults experiments/defaults.py --version expert: the default expert tiles on few, wide experts against
#             candidate changes and the tuned table (XDEFAULTS_ARGS)
#   minimal   experiments/minimal_pair.py --version v1: notebook 4's minimal pair against the shipped pair (MINIMAL_ARGS)
#   vllm      vLLM's Triton fused_moe against warpdecode.moe (experiments/vllm_baseline.py, VLLM_ARGS, default
#             --version bf16; --version fp8 for the w8a8 path): carry .vllm (bash tools/vllm_bundle.sh), unpacked
#             into ~/vllm; the sweep stops starting cases TIMEOUT_VLLM − 60 s in (default limit 520 s)
#   quick     compare on qwen3-30b-a3b with the configs in the tree (default or tuned)
#   tune      search the presets' launch configs (python -m bench tune, TUNE_ARGS), writes warpdecode/tuned/<GPU>.json (copied to $OUT)
#   bench     sweeps to results/<GPU>/*.csv (BENCH_ARGS; the CSVs it wrote copied to $OUT)
#   e2e       whole decode steps (E2E_ARGS): tokens/s, per-layer error vs float64, HF generate
#   generate  GEN_BUDGET seconds in all (default 460): the CUDA-graph and batch-invariance GPU tests, batch
#             invariance's cost (experiments/warp_schedule.py --version invariant), then compiled static-cache
#             HF generate, grouped_mm against warpdecode (each in a fresh process per round, alternating over
#             --hf-repeats rounds, default 3: six processes per model): qwen3-30b-a3b at batch 1 4 16, olmoe-1b-7b and
#             mixtral-8x7b at batch 1, GEN_LAYERS layers each (default 4; empty: as many as fit), the last
#             model given what time is left; GEN_SPECS ("model:batches:limit;…") picks other runs, in
#             that order, and GEN_TESTS=0 leaves out the tests and the invariance cost
#   hfprof    experiments/profiling.py --version hf_compiled: torch.profiler on compiled static-cache HF generate
#             (HFPROF_ARGS), the host's launches outside the CUDA graphs and the GPU's busy time per step
#   nbwheels  install the Jupyter and nbval wheels carried in WHEELS (default .whl; tools/notebook_wheels.sh) into
#             NB_SITE (default ~/site, which a warm machine keeps between calls)
#   notebooks execute notebooks/*.ipynb in place, then nbval on them (after nbwheels)
#   piece     copy the archive pieces carried in WHEELS (p3_*) to ~/t39 (tools/triton_pieces.sh)
#   triton39  unpack ~/t39's pieces: the later stages run on that triton
#   crossover derive the auto crossover from results/<GPU>/speed.csv into the tuned table
#   pack      everything written (logs, CSV, tuned table) into $OUT/run.tar.gz: one file back (a call
#             returns at most eight)
# Each stage runs under its own time limit (seconds, env TIMEOUT_<STAGE>) so a slow one cannot
# eat the call; what finished is still copied back.
# Every results row names the commit measured (bench.sweep.commit): in a copy of the
# tree without .git, export WARPDECODE_COMMIT=<hash> (with -dirty where the copy differs from it).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/warpdecode-out}
NB_SITE=${NB_SITE:-$HOME/site}
mkdir -p "$OUT"
GPU_DIR=results/$(python3 -c "import torch; print(torch.cuda.get_device_name().replace(' ', '_'))")

run() {  # run NAME LIMIT CMD...: time-limited, logged to $OUT/NAME.log
  local name=$1 limit=$2; shift 2
  echo "=== $name (limit ${limit}s): $*"
  local t0=$SECONDS
  timeout -k 15 "$limit" "$@" > >(tee "$OUT/$name.log") 2>&1
  local rc=$?
  echo "=== $name rc=$rc in $((SECONDS - t0))s"
}

fresh_csvs() {  # fresh_csvs MARKER: copy to $OUT only the results CSVs written since MARKER was touched (a call
  # returns at most eight files: the folder's other CSVs, copied back unchanged, would crowd out what was measured)
  find "$GPU_DIR" -maxdepth 1 -name '*.csv' -newer "$1" -exec cp {} "$OUT/" \;
}

experiment() {  # experiment STAGE FILE VERSION CSV LIMIT [ARGS...]: experiments/FILE.py --version VERSION, then its CSV to $OUT
  local name=$1 file=$2 version=$3 csv=$4 limit=$5; shift 5
  run "$name" "$limit" python3 "experiments/$file.py" --version "$version" "$@"
  cp "experiments/$GPU_DIR/$csv.csv" "$OUT/" 2>/dev/null
}

for stage in "$@"; do
  case $stage in
    env)
      { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv
        python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__, 'cuda', torch.version.cuda)"
        python3 -c "import transformers; print('transformers', transformers.__version__)" || true
      } 2>&1 | tee "$OUT/env.log" ;;
    check)
      run smoke "${TIMEOUT_SMOKE:-240}" python3 tools/gpu_smoke.py ${SMOKE_ARGS:-}
      [ -n "${SMOKE_ONLY:-}" ] && continue
      run memcheck "${TIMEOUT_MEMCHECK:-240}" compute-sanitizer --tool memcheck --error-exitcode 9 \
          python3 tools/gpu_smoke.py --presets tiny gpt-oss-20b --T 3 40
      if [ -z "${SKIP_PYTEST:-}" ] && ls tests/test_*.py >/dev/null 2>&1; then
        run pytest_gpu "${TIMEOUT_PYTEST:-300}" python3 -m pytest -m gpu -q -x tests -p no:cacheprovider
      fi ;;
    pytest)  # the GPU tests alone, then the stage tests (unmarked: they run on the CPU too, compiled here)
      run pytest_gpu "${TIMEOUT_PYTEST:-420}" python3 -m pytest -m gpu -q -rfEx tests -p no:cacheprovider ${PYTEST_ARGS:-}
      run pytest_stages "${TIMEOUT_STAGES:-200}" python3 -m pytest -q -rfE tests/test_expert_stages.py -p no:cacheprovider ${PYTEST_ARGS:-} ;;
    lab) experiment lab reads stream small_reads "${TIMEOUT_LAB:-90}" ;;
    variants) experiment variants warp_schedule 5 warp_variants "${TIMEOUT_VARIANTS:-300}" ${VARIANT_ARGS:-} ;;
    ordered) experiment ordered one_launch 8 ordered_launch "${TIMEOUT_ORDERED:-400}" ${ORDERED_ARGS:-} ;;
    gateup) experiment gateup gate_up ladder gate_up_ladder "${TIMEOUT_GATEUP:-200}" ${GATEUP_ARGS:-} ;;
    preload) experiment preload warp_down 13 down_preload "${TIMEOUT_PRELOAD:-300}" ${PRELOAD_ARGS:-} ;;
    tiles) experiment tiles expert_path tiles expert_tiles "${TIMEOUT_TILES:-360}" ${TILES_ARGS:-} ;;
    expdl) experiment expdl expert_path pdl expert_pdl "${TIMEOUT_EXPDL:-300}" ${EXPDL_ARGS:-} ;;
    chunks) experiment chunks warp_down 14 chunk_flags "${TIMEOUT_CHUNKS:-240}" ${CHUNKS_ARGS:-} ;;
    halfm) experiment halfm expert_path half_m half_m "${TIMEOUT_HALFM:-300}" ${HALFM_ARGS:-} ;;
    tma) experiment tma warp_down 15 down_tma "${TIMEOUT_TMA:-300}" ${TMA_ARGS:-} ;;
    dladder) experiment dladder warp_down ladder down_ladder "${TIMEOUT_DLADDER:-200}" ${DLADDER_ARGS:-} ;;
    align) experiment align expert_path align align_variants "${TIMEOUT_ALIGN:-200}" ${ALIGN_ARGS:-} ;;
    swapab) experiment swapab expert_path swap_ab swap_ab "${TIMEOUT_SWAPAB:-300}" ${SWAPAB_ARGS:-} ;;
    xbound) experiment xbound expert_path bound expert_bound "${TIMEOUT_XBOUND:-180}" ${XBOUND_ARGS:-} ;;
    xdefaults) experiment xdefaults defaults expert expert_defaults "${TIMEOUT_XDEFAULTS:-240}" ${XDEFAULTS_ARGS:-} ;;
    minimal) experiment minimal minimal_pair v1 minimal_pair "${TIMEOUT_MINIMAL:-150}" ${MINIMAL_ARGS:-} ;;
    vllm)  # the bundle into ~/vllm, its libraries decompressed; then the sweep, its budget inside the stage's limit
      rm -rf ~/vllm && cp -r .vllm ~/vllm && { xz -d ~/vllm/vllm/*.so.xz || echo "xz failed: vllm_path.py decompresses"; }
      vllm_limit=${TIMEOUT_VLLM:-520}
      run vllm "$vllm_limit" env VLLM_BUNDLE="$HOME/vllm" python3 experiments/vllm_baseline.py \
          --budget-s $((vllm_limit - 60)) ${VLLM_ARGS:---version bf16}
      cp "experiments/$GPU_DIR/vllm_baseline.csv" "$OUT/" 2>/dev/null ;;
    draws) experiment draws warp_schedule draws schedule_draws "${TIMEOUT_DRAWS:-300}" ${DRAWS_ARGS:-} ;;
    order) experiment order one_launch 16 expert_order "${TIMEOUT_ORDER:-420}" ${ORDER_ARGS:-} ;;
    down2d) experiment down2d warp_down 17 down_2d "${TIMEOUT_DOWN2D:-300}" ${DOWN2D_ARGS:-} ;;
    kfirst) experiment kfirst warp_down 18 down_kfirst "${TIMEOUT_KFIRST:-240}" ${KFIRST_ARGS:-} ;;
    fp8tiles) experiment fp8tiles fp8_warp tiles fp8_tiles "${TIMEOUT_FP8TILES:-240}" ${FP8TILES_ARGS:-} ;;
    fp8bound) experiment fp8bound fp8_warp bound fp8_bound "${TIMEOUT_FP8BOUND:-150}" ${FP8BOUND_ARGS:-} ;;
    f16rows) experiment f16rows fp8_expert rows fp8_rows "${TIMEOUT_F16ROWS:-300}" ${F16ROWS_ARGS:-} ;;
    fp8mma) experiment fp8mma fp8_mma mma fp8_mma "${TIMEOUT_FP8MMA:-240}" ${FP8MMA_ARGS:-} ;;
    shapes)
      export WARPDECODE_CACHE_DIR=${WARPDECODE_CACHE_DIR:-/tmp/warpdecode-cache}
      IFS=';' read -ra tune_shapes <<< "${TUNE_SHAPES:-2048 1408 64 6;2048 1408 60 4;3584 2560 64 8;6144 10752 16 4}"
      for s in "${tune_shapes[@]}"; do
        run "tune_${s// /_}" "${TIMEOUT_TUNE_SHAPE:-240}" python3 -m warpdecode tune --shape $s ${TUNE_SHAPE_ARGS:-}
      done
      cp "$WARPDECODE_CACHE_DIR"/*.json "$OUT/" 2>/dev/null
      experiment shapes_defaults defaults defaults defaults "${TIMEOUT_SHAPES:-300}" ${SHAPES_ARGS:-} ;;
    bound) experiment bound reads bound one_launch_bound "${TIMEOUT_BOUND:-400}" ${BOUND_ARGS:-} ;;
    profile)  # --clock-control none: leave the clocks alone
      NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
      run profile "${TIMEOUT_PROFILE:-300}" "$NCU" --profile-from-start off --clock-control none --nvtx \
          --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
          --section WarpStateStats --section SchedulerStats --export "$OUT/profile" python3 experiments/profiling.py --version pair ${PROFILE_ARGS:-}
      "$NCU" --import "$OUT/profile.ncu-rep" --page details > "$OUT/profile_details.log" 2>&1 ;;
    memtest)  # -v: every finished test is in the log even if the stage runs out of time
      run memtest "${TIMEOUT_MEMTEST:-240}" compute-sanitizer --tool memcheck --error-exitcode 9 \
          python3 -m pytest -m gpu -v -p no:cacheprovider tests/test_gpu.py \
          -k "${MEMTEST_K:-edge or T0 or barriers}" ;;
    fp8)  # limits sum to about 9 minutes; each run keeps what it finished
      presets=${FP8_PRESETS:-qwen3-30b-a3b qwen3-235b-a22b deepseek-v3 mixtral-8x7b gpt-oss-20b olmoe-1b-7b}
      fp8_runs=" ${FP8_RUNS:-pytest warp auto accuracy layers} "
      [[ $fp8_runs == *" pytest "* ]] && run fp8_pytest "${TIMEOUT_FP8_PYTEST:-240}" python3 -m pytest -q -rfE \
          -p no:cacheprovider -p no:randomly tests/test_fp8_gpu.py tests/test_fp8.py \
          -k "presets or edges or (graph and not compiled) or convert or at_the_floor or tuner or capped_tiles or tiles_by_tma or weight_only_bits"
      [[ $fp8_runs == *" warp "* ]] && run fp8_warp "${TIMEOUT_FP8_WARP:-120}" python3 -m bench.fp8 --fresh \
          --what speed --phase warp --presets $presets --budget-s 90
      [[ $fp8_runs == *" auto "* ]] && run fp8_auto "${TIMEOUT_FP8_AUTO:-80}" python3 -m bench.fp8 --what speed \
          --phase auto --presets $presets --budget-s $(( ${TIMEOUT_FP8_AUTO:-80} - 30 ))
      [[ $fp8_runs == *" accuracy "* ]] && run fp8_accuracy "${TIMEOUT_FP8_ACCURACY:-35}" python3 -m bench.fp8 \
          --what accuracy --presets $presets --budget-s 20
      [[ $fp8_runs == *" layers "* ]] && run fp8_layers "${TIMEOUT_FP8_LAYERS:-35}" python3 -m bench.fp8 \
          --what layers --layers "${FP8_LAYERS:-8}"
      if [ -n "${FP8_LESSON:-}" ]; then
        run fp8_lesson "${TIMEOUT_FP8_LESSON:-150}" python3 -m bench.fp8 --what speed --phase lesson \
            --presets $presets --budget-s 120
      fi
      run fp8_bar 15 python3 -m bench.fp8 --what figures
      cp "$GPU_DIR"/fp8_*.csv "$GPU_DIR"/fp8_tuned.json "$OUT/" 2>/dev/null ;;
    compiled)
      run compiled "${TIMEOUT_COMPILED:-300}" python3 -m pytest -m gpu -q -rA -p no:cacheprovider \
          tests/test_fp8_gpu.py tests/test_gpu.py -k "compiled_with_cuda_graphs" ;;
    quick)
      run quick "${TIMEOUT_QUICK:-200}" python3 -m bench compare --preset qwen3-30b-a3b --T 1 2 4 8 64 ;;
    nopdl)
      run nopdl "${TIMEOUT_QUICK:-200}" env WARPDECODE_PDL=0 python3 -m bench compare --preset qwen3-30b-a3b --T 1 2 4 8 ;;
    tune)
      run tune "${TIMEOUT_TUNE:-420}" python3 -m bench tune ${TUNE_ARGS:-}
      cp warpdecode/tuned/*.json "$OUT/" 2>/dev/null ;;
    bench)
      touch /tmp/gpu-sh-bench.start
      run bench "${TIMEOUT_BENCH:-480}" python3 -m bench bench ${BENCH_ARGS:-}
      fresh_csvs /tmp/gpu-sh-bench.start ;;
    autobench)  # the auto rows again, after the crossover moved
      touch /tmp/gpu-sh-autobench.start
      run autobench "${TIMEOUT_BENCH:-200}" python3 -m bench bench --methods auto --what speed ${AUTO_ARGS:-}
      fresh_csvs /tmp/gpu-sh-autobench.start ;;
    e2e)
      touch /tmp/gpu-sh-e2e.start
      run "${E2E_NAME:-e2e}" "${TIMEOUT_E2E:-300}" python3 -m bench e2e ${E2E_ARGS:-}
      fresh_csvs /tmp/gpu-sh-e2e.start ;;
    generate)  # each part capped, and never past the stage's deadline; rows are written as they are measured
      gen_end=$((SECONDS + ${GEN_BUDGET:-460}))
      cap() { local rest=$((gen_end - SECONDS)); [ "$rest" -lt 20 ] && rest=20; echo $(( $1 < rest ? $1 : rest )); }
      gen_layers=${GEN_LAYERS-4}
      if [ "${GEN_TESTS:-1}" = 1 ]; then
        run gen_tests "$(cap "${TIMEOUT_GEN_TESTS:-120}")" python3 -m pytest -m gpu -q -rA -p no:cacheprovider \
            tests/test_gpu.py -k "${GEN_TESTS_K:-cuda_graph or batch_invariant or runs_on_the_gpu}"
        run invariant "$(cap "${TIMEOUT_INVARIANT:-100}")" python3 experiments/warp_schedule.py --version invariant \
            --reps 40 ${INVARIANT_ARGS:-}
        cp "experiments/$GPU_DIR/batch_invariance.csv" "$OUT/" 2>/dev/null
      fi
      IFS=';' read -ra gen_specs <<< "${GEN_SPECS:-qwen3-30b-a3b:1 4 16:${TIMEOUT_GEN_QWEN:-170};olmoe-1b-7b:1:${TIMEOUT_GEN_OLMOE:-90};mixtral-8x7b:1:600}"
      for spec in "${gen_specs[@]}"; do
        IFS=: read -r hf_model batches limit <<< "$spec"
        run "gen_${hf_model%%-*}" "$(cap "$limit")" python3 -m bench e2e --what generate --hf-models "$hf_model" \
            --hf-batch $batches ${gen_layers:+--hf-layers $gen_layers} ${GEN_ARGS:-}
      done
      cp "$GPU_DIR/hf_generate.csv" "$OUT/" 2>/dev/null ;;
    hfprof)
      run hfprof "${TIMEOUT_HFPROF:-200}" env TORCH_LOGS="${HFPROF_LOGS:-perf_hints}" python3 experiments/profiling.py \
          --version hf_compiled ${HFPROF_ARGS:-} ;;
    nbwheels)  # the Jupyter and nbval wheels (tools/notebook_wheels.sh DIR; carry DIR, WHEELS=DIR) into NB_SITE
      python3 -m pip install -q --no-index --no-deps --no-compile --target "$NB_SITE" "${WHEELS:-.whl}"/*.whl ;;
    notebooks)  # every notebook in place, then nbval on what it wrote (after nbwheels, in this call or an earlier one)
      run notebooks "${TIMEOUT_NB:-300}" env PYTHONPATH="$NB_SITE:$PYTHONPATH" python3 tools/run_notebooks.py
      mkdir -p "$OUT/nb" && cp notebooks/*.ipynb "$OUT/nb/" && cp figures/*.png "$OUT/nb/" 2>/dev/null
      run nbval "${TIMEOUT_NBVAL:-300}" env PYTHONPATH="$NB_SITE:$PYTHONPATH" python3 -m pytest -q -rfE -p no:cacheprovider \
          --nbval-lax notebooks --nbval-sanitize-with notebooks/nbval_sanitize.cfg ;;
    piece)  # keep the pieces of a large archive carried in WHEELS (p3_*) in ~/t39, for a later call to the warm machine
      mkdir -p ~/t39 && cp "${WHEELS:-.whl}"/p3_* ~/t39/ && ls -l ~/t39 ;;
    triton39)  # unpack the pieces (tools/triton_pieces.sh) and run every later stage on that triton
      cat ~/t39/p3_* | xz -d | tar x -C ~/t39 && chmod +x ~/t39/triton/backends/nvidia/bin/*
      export PYTHONPATH=$HOME/t39:$PYTHONPATH TRITON_BACKENDS_IN_TREE=1
      python3 -c "import triton; print('triton', triton.__version__, triton.__file__)" | tee -a "$OUT/env.log" ;;
    crossover)
      run crossover 60 python3 -m bench report --only crossover
      cp warpdecode/tuned/*.json "$OUT/" 2>/dev/null ;;
    pack)
      tar czf /tmp/run.tar.gz -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv /tmp/run.tar.gz "$OUT/run.tar.gz" ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
