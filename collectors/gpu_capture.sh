#!/usr/bin/env bash
# One prepared GPU capture session (issue 37): everything to quote from one short call on a lent
# NVIDIA GPU machine, in a fixed time budget, with each step's failure recorded and the rest run.
#
#   collectors/gpu_capture.sh --dry-run        # here, no GPU: print every step, check every collect
#                                              # command with `traceanalyze collect --dry-run`
#   collectors/gpu_capture.sh --prepare        # here: the wheels the GPU machine lacks, into .whl/
#   collectors/gpu_capture.sh [--budget-s 480] # there: run the captures, pack them under $OUT
#
# Steps, in order of value (a step starts only while the budget lasts, and is cut at what is left):
#   tput-fp32 / tput-bf16   ResNet-50 at batch 64, 128, 256: fp32, and amp-bf16 + channels-last,
#                           no profiler, NVML sampler on: images/s per batch and precision
#   long-bf16               >= 500 iterations at batch 256 (bf16, channels-last): throughput and
#                           telemetry over a long run
#   torch-fp32 / torch-bf16 the same workload under the PyTorch profiler (batch 64)
#   torch-graph             the step as one CUDA graph (the workload's --cuda-graph, fp32, batch
#                           64): a capture-time trace and a replay trace, for ops --capture
#   ncu                     Nsight Compute with the pipe metrics (FMA, FP16, Tensor, SFU), one step
#   nsys                    Nsight Systems with --gpu-metrics, when an nsys is found
#   sampler-overhead        benchmarks/bench_sampler_overhead.py: the sampler's cost (goal <= 1 %)
#   analyses                summary, diagnose, mfu, coreutil, variability on what was captured
# nvidia-smi --query-gpu ... -lms 100 runs beside everything. Each step's command, exit status and
# seconds go to steps.tsv; provenance (GPU, driver, CUDA, tool versions, date) to provenance.txt.
# What comes back ($OUT holds at most 8 files of 16 MiB): capture.tar.gz (split into parts when
# larger), steps.tsv, provenance.txt and the log.
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
budget_s=480
mode=run
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) mode=dry ;;
    --prepare) mode=prepare ;;
    --budget-s) budget_s=$2; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "gpu_capture.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

# The packages the GPU machine's Python 3.12 lacks (torch, pyarrow, matplotlib, pandas, click, rich,
# numpy and nvidia-ml-py are there). adbc-driver-sqlite is left out to stay under the 64 MiB that
# travel: the SQLite readers fall back to sqlite3, a tested mode.
WHEELS="polars==2.1.0 polars-runtime-32==2.1.0 orjson msgspec cxxfilt isal"

if [ "$mode" = prepare ]; then
  cd "$here" || exit 1
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> "$(git rev-parse --git-common-dir)/info/exclude"
  rm -rf .whl && mkdir .whl
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl $WHEELS || exit 1
  du -sh .whl
  echo "then: run(command='bash collectors/gpu_capture.sh', carry=['.whl'], timeout_s=560)"
  exit 0
fi

out=${OUT:-$here/runs/gpu-capture}
runs=$out/runs
if [ "$mode" = dry ]; then
  PY=${PYTHON:-$here/.venv/bin/python}
  [ -x "$PY" ] || PY=python3
  runs=$(mktemp -d)/runs
else
  PY=${PYTHON:-python3}
  mkdir -p "$runs"
  if compgen -G "$here/.whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site "$here"/.whl/*.whl || { echo "wheel install failed" >&2; exit 1; }
    export PYTHONPATH=/tmp/site
  fi
fi
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
TA=("$PY" -m traceanalyze)
start=$(date +%s)
steps=$out/steps.tsv
[ "$mode" = run ] && printf 'step\texit\tseconds\tcommand\n' > "$steps"

left() { echo $(( budget_s - ($(date +%s) - start) )); }

# step NAME MAX_S CMD...: run CMD under `timeout` cut to the budget left; record it; never abort.
step() {
  local name=$1 max=$2; shift 2
  if [ "$mode" = dry ]; then
    printf '[%s, <= %ss] %s\n' "$name" "$max" "$*"
    if [ "${1:-}" = collect ]; then
      "${TA[@]}" "$@" --device cuda --out "$runs" --run-id "$name" --dry-run --quiet \
        >/dev/null 2>"$runs.err" \
        || { echo "  collect --dry-run refused it: $(tail -1 "$runs.err")"; dry_bad=1; }
    elif [ "${3:-}" = traceanalyze.collect.resnet50 ]; then  # the workload's own argv check
      "$PY" -c 'import sys; from traceanalyze.collect import cuda_graph, resnet50
a = resnet50.build_parser().parse_args(sys.argv[1:]); w = cuda_graph.refusal(a)
sys.exit(w)' "${@:4}" >/dev/null 2>"$runs.err" \
        || { echo "  the workload refused it: $(tail -1 "$runs.err")"; dry_bad=1; }
    fi
    return 0
  fi
  local t; t=$(left)
  [ "$t" -gt "$max" ] && t=$max
  if [ "$t" -lt 20 ]; then printf '%s\tskipped\t0\t%s\n' "$name" "$*" >> "$steps"; return 0; fi
  local s; s=$(date +%s)
  echo "== $name (<= ${t}s): $*"
  if [ "${1:-}" = collect ]; then
    timeout -k 10 "$t" "${TA[@]}" "$@" --device cuda --out "$runs" --run-id "$name"
  else
    timeout -k 10 "$t" "$@"
  fi
  local rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" $(( $(date +%s) - s )) "$*" >> "$steps"
}

provenance() {
  {
    echo "date_utc: $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm,clocks.max.mem \
      --format=csv 2>&1
    nvidia-smi 2>&1 | sed -n '3p'
    "$PY" -c 'import torch, platform; print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1
    echo "ncu: $(ncu --version 2>&1 | tail -1)"
    echo "nsys: $($NSYS --version 2>&1 | tail -1)"
    git -C "$here" rev-parse HEAD 2>/dev/null | sed 's/^/traceanalyze commit: /'
  } > "$out/provenance.txt"
}

NSYS=${NSYS:-$(command -v nsys || ls /opt/nvidia/nsight-systems/*/bin/nsys /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | head -1)}
NSYS=${NSYS:-nsys}
smi_pid=
if [ "$mode" = run ]; then
  provenance
  nvidia-smi --query-gpu=timestamp,index,name,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_throttle_reasons.active \
    --format=csv -lms 100 > "$out/nvidia_smi.csv" 2>&1 &
  smi_pid=$!
fi

dry_bad=0
step tput-fp32 150 collect --profiler none --batch-size 64,128,256 --iterations 40 --warmup 10
step tput-bf16 120 collect --profiler none --batch-size 64,128,256 --iterations 40 --warmup 10 \
  --precision amp-bf16 --channels-last
step long-bf16 90 collect --profiler none --batch-size 256 --iterations 500 --warmup 20 \
  --precision amp-bf16 --channels-last
step torch-fp32 60 collect --profiler torch --batch-size 64 --iterations 12
step torch-bf16 60 collect --profiler torch --batch-size 64 --iterations 12 \
  --precision amp-bf16 --channels-last
step torch-graph 60 "$PY" -m traceanalyze.collect.resnet50 --out "$runs/torch-graph" \
  --device cuda --batch-size 64 --iterations 12 --warmup 3 --torch-profile 2,2,3 --cuda-graph
step ncu 120 collect --profiler ncu --batch-size 64 --iterations 3
if [ "$mode" = dry ] || command -v "$NSYS" >/dev/null 2>&1; then
  PATH="$(dirname "$NSYS"):$PATH" step nsys 60 collect --profiler nsys --gpu-metrics --batch-size 64 --iterations 30
fi
step sampler-overhead 90 "$PY" "$here/benchmarks/bench_sampler_overhead.py" --batch-size 64 \
  --iterations 120 --warmup 20 --repeats 1

# The analyses on what was captured, each bounded: every run's own store (collect ingests it).
analyses() {
  local r n c
  for r in "$runs"/*/; do
    [ -d "$r/store" ] || continue
    n=$(basename "$r")
    for c in summary diagnose mfu; do
      echo "\$ traceanalyze $c --store runs/$n/store"
      timeout 30 "${TA[@]}" "$c" --store "$r/store"
    done > "$out/analyses_$n.txt" 2>&1
  done
  compgen -G "$runs/ncu/batch_*.csv" >/dev/null \
    && timeout 30 "${TA[@]}" coreutil "$runs"/ncu/batch_*.csv > "$out/coreutil.txt" 2>&1
  timeout 30 "${TA[@]}" variability --store "$runs/long-bf16/store" > "$out/variability.txt" 2>&1
  # the graphed step: its replay trace's operators, then with the capture-time trace joined
  local cap rep
  cap=$(compgen -G "$runs/torch-graph/*_capture.pt.trace.json.gz" | head -1)
  rep=$(compgen -G "$runs/torch-graph/torch_bs64_rank0.*.pt.trace.json.gz" | head -1)
  if [ -n "$cap" ] && [ -n "$rep" ]; then
    { timeout 60 "${TA[@]}" ops "$rep" --top 15
      timeout 60 "${TA[@]}" ops "$rep" --capture "$cap" --top 30; } > "$out/ops_capture.txt" 2>&1
  fi
  return 0
}
if [ "$mode" = dry ]; then
  echo "[analyses] summary, diagnose, mfu per run store; coreutil on ncu/batch_*.csv; variability;"
  echo "  ops on the torch-graph replay trace, and with --capture its capture-time trace"
  exit "$dry_bad"
fi
a0=$(date +%s)
analyses
printf 'analyses\t0\t%s\tsummary, diagnose, mfu, coreutil, variability, ops --capture\n' $(( $(date +%s) - a0 )) >> "$steps"
[ -n "$smi_pid" ] && kill "$smi_pid" 2>/dev/null

# Pack: the raw outputs without the stores (made again here by ingest), in parts of 15 MiB.
cd "$out" || exit 1
tar --exclude='*/store' -czf capture.tar.gz runs nvidia_smi.csv analyses_*.txt coreutil.txt \
  variability.txt ops_capture.txt 2>/dev/null
if [ "$(stat -c %s capture.tar.gz)" -gt $((15 * 1024 * 1024)) ]; then
  split -b 15M -d -a 1 capture.tar.gz capture.tar.gz.part && rm capture.tar.gz
fi
rm -rf runs nvidia_smi.csv
ls -la "$out"
cat "$steps"
