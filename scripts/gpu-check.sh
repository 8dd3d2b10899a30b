#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU: build with CUDA, run the GPU tests, time the
# fused mHC kernels at the GPU target size against torch.compile, train on the GPU and measure
# what mHC costs end to end there, and print a summary. A GPU is supposed to be present, so a GPU
# test that reports itself skipped counts as a failure: the exit status is 0 only if every stage
# that ran passed.
#
#   scripts/gpu-check.sh [STAGE ...] [-- CMAKE-ARGS ...]
#
# Stages, in this order (default: all of them):
#   build   configure (CUDA on, NCCL when found) and build
#   test    ctest -L gpu: every GPU test must run and pass
#   bench   plexus bench of mhc_fused on cuda:0: float32 checked against mhc_native; bfloat16 at
#           the GPU target size (s=8192 b=4 -> T=32768, n=4, C=7168) next to bench/torch_mhc.py
#           (PyTorch eager and torch.compile of the same math, same sizes)
#   train   a short training run on the GPU in float32 and in bf16 (run.precision), then the
#           end-to-end cost of mHC (n=4, mhc_fused) over the plain residual on a GPU-sized model
#           in both precisions (scripts/mhc_compare.py), then the fused attention kernel against
#           the unfused one at seq 1024 and 4096 (tokens/s, peak memory)
#   peer    bench/train_vs_torch.py --device cuda: tokens/s against PyTorch eager and
#           torch.compile, float32 and bf16 (torch.autocast), on the default model and on a
#           GPU-sized one (C=1024, 8 layers, seq 1024, micro-batch 8)
#   ep      bench/ep_overlap.py: an all-MoE GPT with ep = world under mpirun -np 2 and 4,
#           sequential scheduler against combined_1f1b (tokens/s, the MoE layers' time per step).
#           moe.layer has no CUDA path yet, so its layers run on this machine's CPUs: the
#           comparison of docs/performance.md on more cores, not a GPU measurement
# Stages after build use the build directory an earlier build stage left.
#
# Environment (all optional):
#   PLEXUS_GPU_BUILD_DIR      build directory (default: build-gpu)
#   PLEXUS_GPU_RESULTS        where logs and JSON go (default: <build>/gpu-check)
#   PLEXUS_JOBS               build parallelism (default: all cores)
#   PLEXUS_CUDA_ARCHITECTURES CMAKE_CUDA_ARCHITECTURES (default: native, i.e. this machine's GPUs;
#                             90 when no GPU is visible)
#   PLEXUS_DEPS_DIR           a folder of .deb files from `scripts/offline-deps.sh download`, for a
#                             machine without a package registry: unpacked into <build>/deps once
#   PLEXUS_PYTHON             the python with a CUDA PyTorch (default: the first of python3 on PATH
#                             and /usr/bin/python3 whose torch sees a GPU)
#   PLEXUS_GPU_CONFIG         the short training run's config (default: configs/default.json)
#   PLEXUS_GPU_STEPS          its steps (default: 50)
#   PLEXUS_MHC_COST_STEPS     steps of each run of the end-to-end mHC comparison (default: 60)
#   PLEXUS_PEER_REPEATS       alternating runs per side in the peer stage (default: 3)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${PLEXUS_GPU_BUILD_DIR:-$root/build-gpu}"
jobs="${PLEXUS_JOBS:-$(nproc)}"
config="${PLEXUS_GPU_CONFIG:-$root/configs/default.json}"
steps="${PLEXUS_GPU_STEPS:-50}"
cost_steps="${PLEXUS_MHC_COST_STEPS:-60}"
bin="$build/bin"
logs="${PLEXUS_GPU_RESULTS:-$build/gpu-check}"

all_stages=(build test bench train peer ep)
stages=()
cmake_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; cmake_args=("$@"); break ;;
    build | test | bench | train | peer | ep) stages+=("$1") ;;
    all) stages+=("${all_stages[@]}") ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown stage '$1' (expected: ${all_stages[*]}, all, or -- CMAKE-ARGS)" >&2; exit 2 ;;
  esac
  shift
done
[ ${#stages[@]} -gt 0 ] || stages=("${all_stages[@]}")
wants() { [[ " ${stages[*]} " == *" $1 "* ]]; }

summary=()
status=0
pass() { summary+=("PASS  $1"); }
fail() {
  summary+=("FAIL  $1")
  status=1
}
note() { summary+=("NOTE  $1"); }
section() { printf '\n== %s\n' "$1"; }
finish() {
  section "summary (stages: ${stages[*]})"
  printf '  %s\n' "${summary[@]}"
  if [ "$status" -eq 0 ]; then
    echo "gpu-check: all checks passed"
  else
    echo "gpu-check: FAILED (see above; logs in $logs)"
  fi
  exit "$status"
}
mkdir -p "$build" "$logs"

# ---- the GPU ------------------------------------------------------------------------------------
section "GPU"
have_gpu=0
if ! command -v nvidia-smi >/dev/null 2>&1; then
  fail "GPU: nvidia-smi not found (no NVIDIA driver on this machine)"
elif ! gpus="$(nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>&1)"; then
  fail "GPU: nvidia-smi failed: $gpus"
elif [ -z "$gpus" ]; then
  fail "GPU: nvidia-smi lists no GPU"
else
  have_gpu=1
  echo "$gpus" | sed 's/^/  /'
  pass "GPU: $(echo "$gpus" | head -n 1 | cut -d, -f2 | sed 's/^ *//')$([ "$(echo "$gpus" | wc -l)" -gt 1 ] && echo " (+$(($(echo "$gpus" | wc -l) - 1)) more)")"
fi

# ---- dependencies carried as .deb files (machines without a package registry) -------------------
if [ -n "${PLEXUS_DEPS_DIR:-}" ]; then
  deps="$build/deps"
  if [ ! -f "$deps/.unpacked" ]; then
    section "unpacking $PLEXUS_DEPS_DIR into $deps"
    if ! "$root/scripts/offline-deps.sh" unpack "$PLEXUS_DEPS_DIR" "$deps" >"$logs/deps.env"; then
      fail "dependencies: scripts/offline-deps.sh unpack $PLEXUS_DEPS_DIR failed"
      finish
    fi
    touch "$deps/.unpacked"
  fi
  # shellcheck disable=SC1090
  source <("$root/scripts/offline-deps.sh" env "$deps")
  note "dependencies from $PLEXUS_DEPS_DIR (unpacked in $deps)"
fi

# ---- the python with a CUDA PyTorch -------------------------------------------------------------
python="${PLEXUS_PYTHON:-}"
if [ -z "$python" ]; then
  for candidate in "$(command -v python3 || true)" /usr/bin/python3; do
    [ -n "$candidate" ] || continue
    if "$candidate" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
      python="$candidate"
      break
    fi
  done
fi
have_torch_cuda=0
if [ -n "$python" ] && "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  have_torch_cuda=1
  echo "python with CUDA PyTorch: $python ($("$python" -c 'import torch; print(torch.__version__)'))"
fi

# ---- build --------------------------------------------------------------------------------------
if wants build; then
  arch="${PLEXUS_CUDA_ARCHITECTURES:-}"
  if [ -z "$arch" ]; then
    if [ "$have_gpu" -eq 1 ]; then arch=native; else arch=90; fi
  fi
  # NCCL: the toolkit's, else the one a CUDA PyTorch ships (the nvidia-nccl wheel has the header
  # and libnccl.so.2 but no unversioned library name for find_library).
  nccl_args=()
  if [ "$have_torch_cuda" -eq 1 ] && ! printf '%s\n' "${cmake_args[@]}" | grep -q NCCL_; then
    wheel_nccl="$("$python" -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)"
    if [ -n "$wheel_nccl" ] && [ -f "$wheel_nccl/include/nccl.h" ] && [ -f "$wheel_nccl/lib/libnccl.so.2" ]; then
      if ! find /usr/include /usr/local/cuda/include -maxdepth 1 -name nccl.h 2>/dev/null | grep -q .; then
        nccl_args=(-DNCCL_INCLUDE_DIR="$wheel_nccl/include" -DNCCL_LIBRARY="$wheel_nccl/lib/libnccl.so.2")
        echo "NCCL from PyTorch's wheel: $wheel_nccl"
      fi
    fi
  fi
  section "configure ($build, CUDA architectures: $arch)"
  # Warnings do not stop this build (the GPU machine's CUDA may be newer than the one the code is
  # checked with): it is here to run the GPU paths, not to judge the warnings.
  if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPLEXUS_WITH_CUDA=ON \
    -DPLEXUS_WARNINGS_AS_ERRORS=OFF \
    -DPLEXUS_WITH_NCCL=AUTO -DCMAKE_CUDA_ARCHITECTURES="$arch" "${nccl_args[@]}" "${cmake_args[@]}" 2>&1 |
    tee "$logs/configure.log"; then
    fail "configure (PLEXUS_WITH_CUDA=ON): see $logs/configure.log"
    finish
  fi
  pass "configure: $(grep -o 'CUDA=[A-Z]* NCCL=[A-Z]* MPI=[A-Z]*' "$logs/configure.log" | tail -n 1)"

  section "build (-j $jobs)"
  build_start=$SECONDS
  if ! cmake --build "$build" -j "$jobs" 2>&1 | tee "$logs/build.log"; then
    fail "build: see $logs/build.log"
    finish
  fi
  pass "build ($((SECONDS - build_start)) s)"
fi
if [ ! -x "$bin/plexus" ] || [ ! -x "$bin/plexus-train" ]; then
  fail "no build in $build (run the build stage first)"
  finish
fi

# ---- test: the GPU tests, every one must run (none skipped) and pass ----------------------------
if wants test; then
  section "ctest -L gpu"
  ctest_rc=0
  ctest --test-dir "$build" -L gpu --output-on-failure 2>&1 | tee "$logs/ctest-gpu.log" || ctest_rc=$?
  # "100% tests passed, 0 tests failed out of 9" (CMake 3.25) or "100% tests passed out of 9" (newer)
  total="$(sed -n 's/.*tests passed.* out of \([0-9]*\).*/\1/p' "$logs/ctest-gpu.log" | tail -n 1)"
  skipped="$(grep -c '(Skipped)' "$logs/ctest-gpu.log" || true)"
  if [ "$ctest_rc" -ne 0 ]; then
    fail "GPU tests: ctest failed (exit $ctest_rc), see $logs/ctest-gpu.log"
  elif [ -z "$total" ] || [ "$total" -eq 0 ]; then
    fail "GPU tests: ctest found no test labelled gpu"
  elif [ "$skipped" -gt 0 ]; then
    fail "GPU tests: $skipped of $total skipped although a GPU should be present: $(grep '(Skipped)' "$logs/ctest-gpu.log" | sed 's/^[[:space:]]*[0-9]* - //; s/ (Skipped)//' | tr '\n' ' ' | sed 's/ $//')"
  else
    pass "GPU tests: $total of $total passed"
  fi
fi

# ---- bench: the fused mHC kernels ---------------------------------------------------------------
if wants bench; then
  # float32 at a mid size, every output and gradient compared with mhc_native's CUDA device.
  section "mhc_fused float32 on the GPU, checked against mhc_native"
  if "$bin/plexus" bench --backend mhc_fused --device cuda:0 --primitive all --tokens 16384 --streams 4 \
    --hidden 1024 --repeats 20 --check mhc_native --json "$logs/bench_mhc_fused_f32.json" 2>&1 |
    tee "$logs/bench_mhc_fused_f32.log"; then
    pass "mhc_fused float32: matches mhc_native (T=16384 n=4 C=1024)"
  else
    fail "mhc_fused float32: plexus bench failed or differs from mhc_native, see $logs/bench_mhc_fused_f32.log"
  fi

  # bfloat16 at the target size: s=8192 b=4 (T=32768), n=4, C=7168, K=20.
  section "mhc_fused bfloat16 at the GPU target size (T=32768 n=4 C=7168)"
  target=(--tokens 32768 --streams 4 --hidden 7168)
  if "$bin/plexus" bench --backend mhc_fused --device cuda:0 --primitive all "${target[@]}" --dtype bf16 \
    --repeats 20 --check none --json "$logs/bench_mhc_fused_bf16_target.json" 2>&1 |
    tee "$logs/bench_mhc_fused_bf16_target.log"; then
    pass "mhc_fused bfloat16 at the target size: timings in $logs/bench_mhc_fused_bf16_target.log"
  else
    fail "mhc_fused bfloat16 at the target size: plexus bench failed, see $logs/bench_mhc_fused_bf16_target.log"
  fi
  if [ "$have_torch_cuda" -eq 1 ]; then
    section "the same math in PyTorch (eager and torch.compile), same sizes, bfloat16"
    if "$python" "$root/bench/torch_mhc.py" --device cuda --dtype bf16 "${target[@]}" --compile --reps 20 \
      --plexus-json "$logs/bench_mhc_fused_bf16_target.json" 2>&1 | tee "$logs/torch_mhc_target.log"; then
      pass "PyTorch comparison at the target size: $logs/torch_mhc_target.log"
    else
      fail "bench/torch_mhc.py --device cuda failed, see $logs/torch_mhc_target.log"
    fi
  else
    note "no CUDA PyTorch (PLEXUS_PYTHON selects one): torch.compile comparison not run"
  fi
fi

# ---- train: a short run, then what mHC costs end to end -----------------------------------------
# shellcheck source=lib/fortunes.sh
source "$root/scripts/lib/fortunes.sh"
prepare_corpus() {
  local prefix="$build/data/fortunes"
  prepare_fortunes "$bin/plexus" "$prefix" >"$logs/data.log" 2>&1 || return 1
  echo "$prefix"
}
if wants train || wants peer || wants ep; then
  if ! data_path="$(prepare_corpus)"; then
    fail "training: no corpus (see $logs/data.log)"
    finish
  fi
fi

# One profiled training run on the GPU in a precision (run.precision): its log ends with a table
# of every unit's GPU time (docs/config.md).
train_run() {
  local precision="$1"
  section "GPU training run ($steps steps, $(basename "$config"), $precision)"
  local run_dir
  run_dir="$build/runs/gpu-check-$precision-$(date +%Y%m%d-%H%M%S)"
  local train_args=(--config "$config" --set run.device=cuda --set "run.precision=$precision"
    --set "train.steps=$steps" --set "data.path=$data_path" --set "run.output_dir=$run_dir"
    --set train.profile=true)
  echo "$bin/plexus-train ${train_args[*]}"
  local train_rc=0
  (cd "$root" && "$bin/plexus-train" "${train_args[@]}") 2>&1 | tee "$logs/train_$precision.log" || train_rc=$?
  local metrics="$run_dir/metrics.jsonl"
  if [ "$train_rc" -ne 0 ]; then
    fail "GPU training ($precision): plexus-train failed (exit $train_rc), see $logs/train_$precision.log"
  elif [ ! -s "$metrics" ]; then
    fail "GPU training ($precision): no metrics written ($metrics)"
  elif grep -qiE '"loss"[[:space:]]*:[[:space:]]*"?(nan|inf|-inf)' "$metrics"; then
    fail "GPU training ($precision): a non-finite loss in $metrics"
  else
    cp "$metrics" "$logs/train_metrics_$precision.jsonl"
    echo "first and last metrics:"
    head -n 1 "$metrics" | sed 's/^/  /'
    tail -n 1 "$metrics" | sed 's/^/  /'
    pass "GPU training ($precision): $steps steps, metrics in $logs/train_metrics_$precision.jsonl"
  fi
}

# The end-to-end cost of mHC on a model sized for a GPU (C=1024, 8 layers, 1024-token windows,
# 8 sequences per step): the same runs with and without mHC, median step times.
mhc_cost() {
  local precision="$1"
  section "end-to-end mHC cost on the GPU (mhc_fused, n=4, $precision)"
  local python_any="$python"
  [ -n "$python_any" ] || python_any=/usr/bin/python3
  local gpu_model=(--set run.device=cuda --set "run.precision=$precision" --set model.hidden_size=1024
    --set model.num_layers=8 --set model.num_attention_heads=8 --set model.seq_length=1024
    --set train.micro_batch_size=8)
  local log="$logs/mhc_cost_gpu_$precision.log"
  if "$python_any" "$root/scripts/mhc_compare.py" --data "$data_path" --config "$root/configs/gpt_mhc.json" \
    --build "$build" --steps "$cost_steps" --eval-interval "$cost_steps" "${gpu_model[@]}" \
    --out "$logs/mhc_cost_gpu_$precision" 2>&1 | tee "$log"; then
    pass "end-to-end mHC cost ($precision): $(grep -o 'mHC costs [^ ]*' "$log" | tail -n 1) time per step (target < 5%)"
  else
    fail "end-to-end mHC cost ($precision): scripts/mhc_compare.py failed, see $log"
  fi
}

# The fused (flash) attention kernel against the unfused one (model.attention_backend), bf16, on
# the GPU-sized model at seq 1024 and at seq 4096: tokens/s of the last logged step of each run,
# alternating, and the peak device memory nvidia-smi saw during it.
attention_ab() {
  section "fused against unfused attention (bf16; model.attention_backend auto / unfused)"
  local shapes=("1024 8" "4096 2")
  for shape in "${shapes[@]}"; do
    read -r seq mbs <<<"$shape"
    for backend in auto unfused auto unfused; do
      local log="$logs/attention_${backend}_${seq}.log" peak="$logs/attention_${backend}_${seq}.mem"
      (while true; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; sleep 0.2; done) >"$peak" 2>/dev/null &
      local monitor=$!
      local rc=0
      (cd "$root" && "$bin/plexus-train" --config "$config" --set run.device=cuda --set run.precision=bf16 \
        --set model.hidden_size=1024 --set model.num_layers=8 --set model.num_attention_heads=8 \
        --set "model.seq_length=$seq" --set "train.micro_batch_size=$mbs" --set train.steps=30 \
        --set train.log_interval=10 --set train.eval_interval=100000 --set sample.tokens=0 \
        --set "model.attention_backend=$backend" --set "data.path=$data_path" \
        --set "run.output_dir=$build/runs/attention-$backend-$seq") >"$log" 2>&1 || rc=$?
      kill "$monitor" 2>/dev/null
      wait "$monitor" 2>/dev/null || true
      if [ "$rc" -ne 0 ]; then
        fail "attention $backend, seq $seq: plexus-train failed (exit $rc), see $log"
        continue
      fi
      local rate
      rate="$(grep -o '[0-9]* tok/s' "$log" | tail -n 1)"
      echo "  $backend seq $seq: $rate, peak $(sort -n "$peak" | tail -n 1) MiB"
      note "attention $backend, seq $seq x $mbs: $rate, peak $(sort -n "$peak" | tail -n 1) MiB"
    done
  done
}

if wants train; then
  # float32 first: it is what the GPU tests compare against the CPU; bf16 is how a GPU trains.
  for precision in fp32 bf16; do train_run "$precision"; done
  for precision in fp32 bf16; do mhc_cost "$precision"; done
  attention_ab
fi

# ---- peer: throughput against PyTorch on the GPU ------------------------------------------------
if wants peer; then
  section "GPU throughput against PyTorch eager and torch.compile"
  if [ "$have_torch_cuda" -eq 1 ]; then
    # The default model (C=128: launch-bound on a GPU) and a GPU-sized one (C=1024, 8 layers,
    # 1024-token windows, 8 sequences per step).
    gpu_size=(--set model.hidden_size=1024 --set model.num_layers=8 --set model.num_attention_heads=8
      --set model.seq_length=1024 --set train.micro_batch_size=8)
    for model in default gpu_size; do
      for precision in fp32 bf16; do
        log="$logs/bench_${model}_$precision.log"
        sizes=()
        [ "$model" = gpu_size ] && sizes=("${gpu_size[@]}")
        if "$python" "$root/bench/train_vs_torch.py" --build "$build" --device cuda --precision "$precision" \
          --peers this,this-compile --repeats "${PLEXUS_PEER_REPEATS:-3}" --steps 20 --warmup 5 \
          --set "data.path=$data_path" "${sizes[@]}" \
          --json "$logs/train_vs_torch_cuda_${model}_$precision.json" 2>&1 | tee "$log"; then
          pass "GPU training throughput ($model, $precision): $(grep '^strongest peer' "$log" | sed 's/^strongest peer: //')"
        else
          fail "GPU training throughput ($model, $precision): bench/train_vs_torch.py --device cuda failed, see $log"
        fi
      done
    done
  else
    note "no CUDA PyTorch (PLEXUS_PYTHON selects one): training throughput comparison not run"
  fi
fi

# ---- ep: the expert-parallel overlap -------------------------------------------------------------
if wants ep; then
  section "expert-parallel overlap: sequential against combined_1f1b (bench/ep_overlap.py, MoE layers on the CPU)"
  python_any="$python"
  [ -n "$python_any" ] || python_any=/usr/bin/python3
  log="$logs/ep_overlap.log"
  if ! command -v mpirun >/dev/null 2>&1; then
    fail "ep overlap: mpirun not found (install the MPI packages of scripts/install-deps.sh)"
  elif [ ! -f "$build/lib/plexus/plugins/libplexus_comm_mpi.so" ]; then
    fail "ep overlap: the build has no MPI comm backend ($build/lib/plexus/plugins/libplexus_comm_mpi.so)"
  elif (cd "$root" && "$python_any" bench/ep_overlap.py --build "$build" --ranks 2 4 --steps 30 \
    --set "data.path=$data_path") 2>&1 | tee "$log"; then
    pass "ep overlap (CPU MoE layers): table in $log"
  else
    fail "ep overlap: bench/ep_overlap.py failed, see $log"
  fi
fi

finish
