#!/usr/bin/env bash
# Engine parity: do two revisions train to byte-identical checkpoints? Builds BASE_REV and NEW
# (default: this working tree as it is, uncommitted changes included) on this machine, trains the
# same runs with each build, and compares their final checkpoints tensor by tensor with
# scripts/compare_checkpoints.py (every tensor of model.safetensors and optimizer.safetensors:
# names, dtypes, shapes, bytes; and state.json's step and data position). Both sides are built
# and run here because the BLAS kernels differ between CPUs: a digest stored elsewhere would not
# travel.
#
#   scripts/engine-parity.sh BASE_REV [NEW_REV]
#   scripts/engine-parity.sh HEAD                  # this working tree against its last commit
#   scripts/engine-parity.sh main~3 main           # two commits
#   PLEXUS_PARITY_RUNS="gpt zero3" scripts/engine-parity.sh HEAD
#
# The runs (each 20 steps from run.seed 1234, the same flags on both sides, evaluation only at
# the end with one batch, no sample, one checkpoint at the end):
#   gpt         the embedded default GPT (configs/default.json, compiled in)
#   hybrid      configs/hybrid.json (Mamba-2 / attention)
#   moe         the default GPT with model.moe.layer_freq=2, 4 experts (plugin moe, loaded on demand)
#   mhc_native  the default GPT with mHC, backend mhc_native
#   mhc_fused   the default GPT with mHC, backend mhc_fused
#   zero3       the default GPT under `mpirun -np 2`, fsdp strategy optim_grads_params (ZeRO-3)
# configs/hybrid.json is read from NEW's tree for both sides (a note says when BASE's differs),
# so the comparison is of the engines, not of two configs.
#
# Reading the output: first the two builds (a build's log is in WORK/logs/build-*.log), then a
# check that BASE and NEW both accept every run's config (a key that BASE does not know stops
# that run with "REFUSED", never a comparison of garbage; a resolved config that differs between
# the builds is a note), then one line per run and side as it trains, and at the end a table:
#   run          base s   new s  loss base            loss new             result
#   gpt               9       6  4.322754383087158    4.322754383087158    identical: 78 tensors (9844224 bytes)
#   moe              12      17  4.300355434417725    4.300355434417725    identical: 120 tensors (19293696 bytes)
# (seconds of training wall time per side, the last step's loss per side). "identical" means
# every tensor of every safetensors file of the two final checkpoints has the same name, dtype,
# shape and bytes, and state.json the same step and data position; otherwise "DIFFERENT: K of N
# tensors differ; first: NAME, max abs difference X", with the first differing tensors of each
# file listed above the table (the whole comparison: WORK/logs/compare-RUN.log; training logs:
# WORK/logs/train-SIDE-RUN.log). The last line is PARITY or NO PARITY. Exit status: 0 when every
# run is identical, 1 when one differs or fails to train, 2 on a bad argument, a failed build or
# a config that BASE (or NEW) refuses.
#
# Environment:
#   PLEXUS_PARITY_DIR        the work directory WORK (default: build-parity/ in the repository,
#                            ignored by git): trees/base/ and trees/new/ (git worktrees of the
#                            revs, kept so that a rerun rebuilds only what changed; remove them
#                            with `git worktree remove --force WORK/trees/base`), build-base/,
#                            build-new/ (NEW_REV) or build-worktree/ (this working tree), data/,
#                            runs/{base,new}/RUN/, logs/
#   PLEXUS_PARITY_NEW_BUILD  an already-built tree (with bin/plexus-train) for the NEW side: no
#                            build of NEW
#   PLEXUS_PARITY_RUNS       the runs, space-separated (default: all six above)
#   PLEXUS_PARITY_STEPS      training steps per run (default 20)
#   PLEXUS_PARITY_SET        more overrides for every run and both sides, space-separated
#                            key=value (no spaces inside), e.g. "train.microbatches=2
#                            optimizer.clip_grad=0.5" to take gradient accumulation and clipping
#                            through the comparison too
#   PLEXUS_PARITY_CLEAN_TREES=1  remove the worktrees at the end (the next run then builds from
#                            scratch: fresh files are newer than every object file)
#   PLEXUS_PARITY_THREADS    OMP_NUM_THREADS of a one-process run (default: nproc); under mpirun
#                            each rank gets max(1, THREADS / 2)
#   PLEXUS_JOBS              parallel compile jobs (scripts/build.sh; default nproc)
# Both sides are Release builds with -DPLEXUS_WITH_CUDA=OFF (the comparison is on the CPU) and
# -DPLEXUS_BUILD_TESTS=OFF. The corpus is Debian's fortunes (scripts/lib/fortunes.sh, as the
# quick start prepares it; apt-get install fortunes), or without it the repository's own
# Markdown files; it is prepared once with BASE's `plexus data prepare`.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
python=/usr/bin/python3
compare="$root/scripts/compare_checkpoints.py"
all_runs="gpt hybrid moe mhc_native mhc_fused zero3"

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 2
}
die() {
  echo "engine-parity: $*" >&2
  exit 2
}

if [ $# -lt 1 ] || [ $# -gt 2 ]; then usage; fi
case "$1" in -h | --help) usage ;; esac
base_rev="$1"
new_rev="${2:-}"
work="${PLEXUS_PARITY_DIR:-$root/build-parity}"
steps="${PLEXUS_PARITY_STEPS:-20}"
runs="${PLEXUS_PARITY_RUNS:-$all_runs}"
threads="${PLEXUS_PARITY_THREADS:-$(nproc)}"
rank_threads=$((threads / 2 > 0 ? threads / 2 : 1))
[ -x "$python" ] || die "$python not found (the comparison runs with the system's python3)"
for r in $runs; do
  case " $all_runs " in *" $r "*) ;; *) die "unknown run '$r' in PLEXUS_PARITY_RUNS (known: $all_runs)" ;; esac
done

base_sha="$(git -C "$root" rev-parse --verify --quiet "$base_rev^{commit}")" || die "BASE_REV '$base_rev' is not a commit"
if [ -n "$new_rev" ]; then
  new_sha="$(git -C "$root" rev-parse --verify --quiet "$new_rev^{commit}")" || die "NEW_REV '$new_rev' is not a commit"
fi
mkdir -p "$work/logs" "$work/data"
work="$(cd "$work" && pwd -P)"
logs="$work/logs"
start_all=$SECONDS

# A git worktree of REV at DIR, reused when DIR already is one (a checkout touches only the
# files that differ, so the build directory beside it rebuilds incrementally).
worktree() {
  local rev="$1" dir="$2"
  if [ -d "$dir" ] && [ "$(git -C "$dir" rev-parse --show-toplevel 2>/dev/null)" = "$dir" ]; then
    git -C "$dir" checkout --quiet --detach --force "$rev"
    git -C "$dir" clean --quiet -fdx
  else
    rm -rf "$dir"
    git -C "$root" worktree prune
    git -C "$root" worktree add --quiet --detach "$dir" "$rev"
  fi
}

# Builds the tree SRC into BUILD (Release, no CUDA, no tests), its output in LOG.
build_tree() {
  local side="$1" src="$2" build="$3" log="$4" t0=$SECONDS
  echo "== build $side: $src -> $build (log: $log)"
  # Warnings never stop a build here: an older revision need not be free of the warnings of the
  # compiler at hand (the default, AUTO, would make them errors with g++ 12 and clang++ 14).
  local flags=(-DPLEXUS_WITH_CUDA=OFF -DPLEXUS_BUILD_TESTS=OFF -DPLEXUS_WARNINGS_AS_ERRORS=OFF)
  local cached
  cached="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" 2>/dev/null || true)"
  if [ -n "$cached" ] && [ "$cached" != "$src" ]; then
    echo "   $build was configured for the sources in $cached: removing it, a full build follows"
    rm -rf "$build"
  fi
  local ok=0
  if [ -x "$src/scripts/build.sh" ]; then
    PLEXUS_BUILD_DIR="$build" PLEXUS_BUILD_TYPE=Release "$src/scripts/build.sh" "${flags[@]}" >"$log" 2>&1 || ok=$?
  else
    { cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${flags[@]}" &&
      cmake --build "$build" -j "${PLEXUS_JOBS:-$(nproc)}"; } >"$log" 2>&1 || ok=$?
  fi
  if [ "$ok" -ne 0 ]; then
    tail -n 30 "$log" >&2
    die "the build of $side failed (exit $ok); its log: $log"
  fi
  echo "   built in $((SECONDS - t0)) s"
}

echo "== engine parity: BASE $base_rev ($base_sha) against NEW ${new_rev:-the working tree}${new_rev:+ ($new_sha)}"
worktree "$base_sha" "$work/trees/base"
base_src="$work/trees/base"
base_build="$work/build-base"
if [ -n "$new_rev" ]; then
  new_src="$work/trees/new"
  worktree "$new_sha" "$new_src"
  new_build="$work/build-new"
else
  new_src="$root"
  new_build="$work/build-worktree"
  changed="$(git -C "$root" status --porcelain --untracked-files=normal | grep -cv '^?? build-parity/' || true)"
  tree_digest() { git -C "$root" diff HEAD | sha256sum | cut -c1-12; }
  digest_before="$(tree_digest)"
  echo "   NEW is $root at $(git -C "$root" rev-parse --short HEAD) with $changed changed or untracked path(s)" \
    "(digest of git diff HEAD: $digest_before)"
fi
if [ "${PLEXUS_PARITY_CLEAN_TREES:-0}" = 1 ]; then
  # shellcheck disable=SC2317  # called by the EXIT trap
  remove_trees() {
    local t
    for t in "$work/trees/base" "$work/trees/new"; do
      if [ -d "$t" ]; then git -C "$root" worktree remove --force "$t" || true; fi
    done
  }
  trap remove_trees EXIT
fi
build_tree base "$base_src" "$base_build" "$logs/build-base.log"
if [ -n "${PLEXUS_PARITY_NEW_BUILD:-}" ]; then
  new_build="$(cd "$PLEXUS_PARITY_NEW_BUILD" && pwd)" || die "PLEXUS_PARITY_NEW_BUILD=$PLEXUS_PARITY_NEW_BUILD: no such directory"
  [ -x "$new_build/bin/plexus-train" ] || die "PLEXUS_PARITY_NEW_BUILD=$new_build has no bin/plexus-train"
  echo "== build new: using $new_build as it is (PLEXUS_PARITY_NEW_BUILD)"
else
  build_tree new "$new_src" "$new_build" "$logs/build-new.log"
  if [ -z "$new_rev" ] && [ "$(tree_digest)" != "$digest_before" ]; then
    echo "   note: the working tree changed while it was building (git diff HEAD digest now $(tree_digest)):" \
      "NEW may mix the two states; rerun to build what is there now"
  fi
fi
declare -A bin=([base]="$base_build/bin" [new]="$new_build/bin")

# The corpus, once, with BASE's tool.
data="$work/data/corpus"
if [ ! -f "$data.idx" ]; then
  echo "== corpus"
  # shellcheck source=scripts/lib/fortunes.sh
  source "$root/scripts/lib/fortunes.sh"
  if ! prepare_fortunes "${bin[base]}/plexus" "$data" >"$logs/data.log" 2>&1; then
    echo "   no fortunes ($(tail -n 1 "$logs/data.log")): the repository's Markdown files instead"
    mapfile -t texts < <(git -C "$root" ls-files -z '*.md' | xargs -0 -I{} echo "$root/{}")
    "${bin[base]}/plexus" data prepare --input "${texts[@]}" --output-prefix "$data" >"$logs/data.log" 2>&1 ||
      { cat "$logs/data.log" >&2; die "plexus data prepare failed"; }
  fi
fi
echo "== corpus: $data ($(stat -c %s "$data.bin") bytes of tokens)"

hybrid_config="$new_src/configs/hybrid.json"
if ! cmp -s "$base_src/configs/hybrid.json" "$hybrid_config"; then
  echo "   note: configs/hybrid.json differs between BASE and NEW; both sides train NEW's"
fi
if ! cmp -s "$base_src/configs/default.json" "$new_src/configs/default.json"; then
  echo "   note: configs/default.json (compiled in) differs between BASE and NEW: the resolved-config check below shows how"
fi

# The config of a run: "--config FILE" or "--default", then its --set flags (plexus-train takes
# no --default, `plexus config show` the FILE without --config).
run_config() {
  local name="$1"
  case "$name" in
    hybrid) echo "--config"; echo "$hybrid_config" ;;
    *) echo "--default" ;;
  esac
  local sets=("run.seed=1234" "train.steps=$steps" "train.eval_interval=0" "train.eval_iters=1"
    "train.log_interval=5" "sample.tokens=0" "checkpoint.interval=0" "data.path=$data")
  case "$name" in
    moe) sets+=("model.moe.layer_freq=2" "model.moe.options.num_moe_experts=4") ;;
    mhc_native | mhc_fused)
      sets+=("mhc.enabled=true" "mhc.backend=$name" "plugins.load=[\"sequential_scheduler\",\"transformer\",\"$name\"]") ;;
    zero3) sets+=('distributed.data_parallel.options={"strategy": "optim_grads_params"}' "distributed.timeout_s=120") ;;
  esac
  local extra
  read -r -a extra <<<"${PLEXUS_PARITY_SET:-}"
  sets+=("${extra[@]}")
  local s
  for s in "${sets[@]}"; do echo "--set"; echo "$s"; done
}

# Does each build accept each run's config? Both, before any training.
echo "== configs: does each build accept each run?"
declare -A refused=()
for name in $runs; do
  mapfile -t args < <(run_config "$name")
  [ "${args[0]}" = --config ] && args=("${args[@]:1}")
  for side in base new; do
    if ! "${bin[$side]}/plexus" config show "${args[@]}" >"$logs/config-$side-$name.json" 2>"$logs/config-$side-$name.err"; then
      refused[$name]+="${refused[$name]:+, }$side"
      echo "   REFUSED: $side does not accept run '$name':"
      sed 's/^/      /' "$logs/config-$side-$name.err" | head -n 20
    fi
  done
  if [ "$name" = zero3 ]; then
    for side in base new; do
      if [ ! -e "${bin[$side]}/../lib/plexus/plugins/libplexus_comm_mpi.so" ] || ! command -v mpirun >/dev/null; then
        refused[$name]+="${refused[$name]:+, }$side"
        echo "   REFUSED: run zero3 needs mpirun and the comm_mpi plugin: $side's build has none or mpirun is missing"
      fi
    done
  fi
  if [ -z "${refused[$name]:-}" ]; then
    if "$python" - "$logs/config-base-$name.json" "$logs/config-new-$name.json" >"$logs/config-diff-$name.txt" <<'EOF'
import json, sys
def flat(o, p=()):
    if isinstance(o, dict):
        for k, v in o.items(): yield from flat(v, p + (k,))
    else: yield p, o
a, b = (dict(flat(json.load(open(f)))) for f in sys.argv[1:3])
d = [k for k in sorted(set(a) | set(b)) if a.get(k, "<absent>") != b.get(k, "<absent>")]
for k in d: print(f"{'.'.join(k)}: base {a.get(k, '<absent>')!r}, new {b.get(k, '<absent>')!r}")
sys.exit(1 if d else 0)
EOF
    then
      echo "   $name: accepted by both, the same resolved config"
    else
      echo "   $name: accepted by both; note: the resolved configs differ:"
      sed 's/^/      /' "$logs/config-diff-$name.txt" | head -n 20
    fi
  fi
done

# Trains run NAME with build SIDE into WORK/runs/SIDE/NAME; prints "seconds final-loss".
train() {
  local side="$1" name="$2" out="$work/runs/$1/$2" log="$logs/train-$1-$2.log"
  mapfile -t args < <(run_config "$name")
  [ "${args[0]}" = --default ] && args=("${args[@]:1}")
  rm -rf "$out"
  local t0=$SECONDS rc=0
  if [ "$name" = zero3 ]; then
    env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS="$rank_threads" \
      timeout -s KILL 900 mpirun --oversubscribe --bind-to none -np 2 -x OMP_NUM_THREADS \
      "${bin[$side]}/plexus-train" "${args[@]}" --set "run.output_dir=$out" >"$log" 2>&1 || rc=$?
  else
    OMP_NUM_THREADS="$threads" timeout -s KILL 900 \
      "${bin[$side]}/plexus-train" "${args[@]}" --set "run.output_dir=$out" >"$log" 2>&1 || rc=$?
  fi
  local loss="-"
  if [ -f "$out/metrics.jsonl" ]; then
    loss="$("$python" -c '
import json, sys
last = [r for r in map(json.loads, open(sys.argv[1])) if r.get("event") == "step"]
print(repr(last[-1]["loss"]) if last else "-")' "$out/metrics.jsonl" 2>/dev/null || echo -)"
  fi
  echo "$rc $((SECONDS - t0)) $loss"
}

declare -A result=() seconds_base=() seconds_new=() loss_base=() loss_new=()
status=0
fail() { if [ "$status" -eq 0 ] || [ "$1" -gt "$status" ]; then status="$1"; fi; }
for name in $runs; do
  if [ -n "${refused[$name]:-}" ]; then
    result[$name]="REFUSED by ${refused[$name]} (see above): not compared"
    fail 2
    continue
  fi
  failed=""
  for side in base new; do
    read -r rc secs loss < <(train "$side" "$name")
    if [ "$side" = base ]; then seconds_base[$name]=$secs loss_base[$name]=$loss; else seconds_new[$name]=$secs loss_new[$name]=$loss; fi
    echo "== train $name with $side: exit $rc, ${secs} s, final loss $loss (log: $logs/train-$side-$name.log)"
    if [ "$rc" -ne 0 ]; then
      tail -n 15 "$logs/train-$side-$name.log" | sed 's/^/   /'
      failed+="${failed:+, }$side (exit $rc)"
    fi
  done
  if [ -n "$failed" ]; then
    result[$name]="FAILED to train: $failed"
    fail 1
    continue
  fi
  rc=0
  "$python" "$compare" "$work/runs/base/$name" "$work/runs/new/$name" >"$logs/compare-$name.log" 2>&1 || rc=$?
  case "$rc" in
    0) result[$name]="$(tail -n 1 "$logs/compare-$name.log")" ;;
    1) first="$(grep -m 1 '^  [^ ]' "$logs/compare-$name.log" |
         sed -E 's/^ *([^:]*):.*(max abs difference [^,]*).*/\1, \2/; s/^ *//' | cut -c 1-120)"
       result[$name]="$(tail -n 1 "$logs/compare-$name.log")${first:+; first: $first}"
       fail 1 ;;
    *) result[$name]="comparison failed: $(tail -n 1 "$logs/compare-$name.log")"
       fail 1 ;;
  esac
  echo "== compare $name: ${result[$name]}"
  if [ "$rc" -ne 0 ]; then
    grep -v '^[AB]: ' "$logs/compare-$name.log" | sed 's/^/   /' | head -n 30
  else
    grep '(note)' "$logs/compare-$name.log" | sed 's/^ */   /' | head -n 10 || true
  fi
done

echo
echo "== engine parity summary: BASE $base_rev ($(git -C "$root" rev-parse --short "$base_sha")) against NEW" \
  "${new_rev:-working tree}${new_build:+ (build $new_build)}, $steps steps, $((SECONDS - start_all)) s in all"
printf '%-11s %7s %7s  %-20s %-20s %s\n' run "base s" "new s" "loss base" "loss new" result
for name in $runs; do
  printf '%-11s %7s %7s  %-20s %-20s %s\n' "$name" "${seconds_base[$name]:--}" "${seconds_new[$name]:--}" \
    "${loss_base[$name]:--}" "${loss_new[$name]:--}" "${result[$name]}"
done
if [ "$status" -eq 0 ]; then
  echo "PARITY: every run's final checkpoint is identical, tensor by tensor"
else
  echo "NO PARITY: see the lines above (logs in $logs)"
fi
exit "$status"
