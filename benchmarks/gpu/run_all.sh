#!/usr/bin/env bash
# GPU benchmark driver for one NVIDIA H200 run: runs the named stages in order, each under
# its own timeout, logging to $OUT/log.txt and re-packing every JSON result into
# $OUT/results.tar after each stage (so a stage killed by a timeout loses only itself).
#
#   bash benchmarks/gpu/run_all.sh env raw decode trainer publish
#
# Stages: env raw decode trainer publish publish-nccl trl e2e moe dense-run moe-run dense-tensor
# decode2 moe-decode trainer-flex e2e-8 e2e-16 trl-8 trl-16 long decode3 e2e3-8 e2e3-16 long16
# long32 startup olmoe-hf fused-test bench-cold bench-warm bench-moe trl5-256 trl5-1024
# e2e5-256 e2e5-1024 moe-update moe-mlp trainer-compiled trainer-recompute decode7 decode8
# decode9 flex-test bench-warm-base bench-warm-trainer e2e10-gc admission decode10 decode11
# e2e11-kv64 e2e12-prefill e2e13-prefill e2e14-1024 bench-warm-sequential
# bench-warm-engine-first triton-test decode-attn decode13 decode14 decode-b64 decode15 e2e14-sdpa
# e2e14-triton prefill15 prefill-test decode-gemm decode17 e2e17-N-KV (e.g. e2e17-1024-fp8_e4m3)
# checksum shared-test shared-attn
# (see below).
# Expects the wheels already installed and PYTHONPATH set (see docs/benchmarks.md, GPU section).
set -u
OUT=${OUT:-/tmp/gpu-out}
RES=${RES:-benchmarks/results/gpu}
mkdir -p "$OUT" "$RES"
LOG=$OUT/log.txt
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
M1B='builtin:olmo3-1b?vocab_size=100352'

stage() {  # stage NAME TIMEOUT CMD...
  local name=$1 t=$2
  shift 2
  echo "=== [$(date -u +%H:%M:%S)] $name (timeout ${t}s): $*" | tee -a "$LOG"
  local t0=$SECONDS
  timeout --kill-after=10 "$t" "$@" 2>&1 | grep -v "Loading weights\|it/s]" | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  echo "=== $name rc=$rc in $((SECONDS - t0))s" | tee -a "$LOG"
  tar -cf "$OUT/results.tar" "$RES" 2>/dev/null
}

for s in "$@"; do
  case $s in
  env)
    stage env 60 bash -c 'nvidia-smi; python3 -c "import torch,transformers,sys;print(sys.version);print(torch.__version__,torch.version.cuda,torch.cuda.get_device_name(),transformers.__version__)";
      python3 -m pip list 2>/dev/null | grep -iE "^(torch|transformers|accelerate|datasets|trl|pyarrow|fsspec|huggingface|safetensors|triton|ai2-olmo|pydantic|aiohttp|httpx) ";
      python3 -c "import importlib.metadata as m, olmo_core, trl, datasets;print(*(p + \" \" + m.version(p) for p in (\"ai2-olmo-core\", \"trl\", \"datasets\")))"; df -h /tmp | tail -1; nproc; free -g | head -2'
    ;;
  raw)
    stage raw-4x2048 150 python3 benchmarks/raw_olmo_core_step.py --batch 4 --seq 2048 --precision bf16 amp --steps 5 --warmup 2
    stage raw-1x8192 100 python3 benchmarks/raw_olmo_core_step.py --batch 1 --seq 8192 --precision amp --steps 4 --warmup 2
    ;;
  decode)
    stage decode 330 python3 benchmarks/gpu/decode.py --batch-sizes 64 256 --prompt-len 128 --new-tokens 256 --repeats 1
    ;;
  trainer)
    stage trainer 200 python3 benchmarks/trainer_step.py --device cuda --model "$M1B" --samples 32 \
      --prompt-len 512 --response-len 1536 --packing-max-tokens 8192 --steps 3 --warmup 1 \
      --out "$RES/trainer_step-olmo3-1b-cuda.json"
    ;;
  publish)
    stage publish 150 python3 benchmarks/gpu/publish.py --source "$M1B" --repeats 3
    ;;
  publish-nccl)  # trainer and engine processes, NCCL broadcast (two GPUs) beside CUDA IPC
    stage publish-nccl 170 python3 benchmarks/gpu/publish_nccl.py --source "$M1B" --repeats 3
    ;;
  trl)
    stage trl 150 python3 benchmarks/trl_grpo.py --prompts 8 --group 8 --new-tokens 256 --steps 2
    ;;
  e2e)
    stage e2e 240 python3 benchmarks/gpu/e2e.py --prompts 8 --group 8 --new-tokens 256 --collections 2
    ;;
  moe)
    stage moe 200 python3 benchmarks/gpu/e2e.py --source builtin:smallmoe --label moe --no-compile-blocks \
      --prompts 4 --group 4 --new-tokens 32 --collections 2
    ;;
  dense-run | moe-run)
    # a real `rlc run` of the GPU example spec: 4 collections, checkpoint every 2, then a
    # resumed run to 6 collections from the newest checkpoint
    name=gpu-${s%-run}
    root=/tmp/runs/$name
    rm -rf "$root"
    stage "$s" 210 python3 -m rlc_cli.main run "specs/examples/$name.toml" --no-progress \
      --set "output.root=\"$root\"" --set checkpoint.interval=2
    stage "$s-resume" 150 python3 -m rlc_cli.main run "specs/examples/$name.toml" --no-progress \
      --set "output.root=\"$root\"" --set checkpoint.interval=2 \
      --set training.num_rollouts=6 --resume required
    mkdir -p "$RES/runs/$name"
    cp "$root/metrics.jsonl" "$RES/runs/$name/" 2>/dev/null
    cp -r "$root/logs" "$RES/runs/$name/" 2>/dev/null
    ls -R "$root/checkpoints" > "$RES/runs/$name/checkpoints.txt" 2>&1
    rm -rf "$root"  # its checkpoints (over 8 GB for gpu-dense) would fill the disk
    tar -cf "$OUT/results.tar" "$RES" 2>/dev/null
    ;;
  dense-tensor)
    # `rlc run` with CUDA IPC publication (/update_weights_from_tensor) to the engine process
    # sharing the GPU; olmo3-190m keeps the two CPU random inits short
    root=/tmp/runs/gpu-dense-tensor
    rm -rf "$root"
    stage "$s" 150 python3 -m rlc_cli.main run specs/examples/gpu-dense.toml --no-progress \
      --set "output.root=\"$root\"" --set 'model.source="builtin:olmo3-190m"' \
      --set 'runtime.publication_transport="tensor"' --set training.num_rollouts=3
    mkdir -p "$RES/runs/gpu-dense-tensor"
    cp "$root/metrics.jsonl" "$RES/runs/gpu-dense-tensor/" 2>/dev/null
    cp -r "$root/logs" "$RES/runs/gpu-dense-tensor/" 2>/dev/null
    rm -rf "$root"  # its checkpoints (over 8 GB for gpu-dense) would fill the disk
    tar -cf "$OUT/results.tar" "$RES" 2>/dev/null
    ;;
  decode2)
    # round two: the eager-step graphs vs the compiled graphs (the GPU default) vs
    # transformers' static cache under torch.compile, same weights, same run
    stage decode2 270 python3 benchmarks/gpu/decode.py --batch-sizes 64 256 --prompt-len 128 \
      --new-tokens 256 --repeats 2 --variants graph,compile graph --hf static --deadline-s 220
    ;;
  moe-decode)
    stage moe-decode 100 python3 benchmarks/gpu/moe_decode.py --batch 64 --prompt-len 128 --new-tokens 128
    ;;
  trainer-flex)
    # GRPO step (FlexAttention block masks) vs the raw OLMo-core step on the same tokens
    # without any document mask
    stage trainer-flex 170 python3 benchmarks/trainer_step.py --device cuda --model "$M1B" --samples 32 \
      --prompt-len 512 --response-len 1536 --packing-max-tokens 8192 --steps 3 --warmup 2 \
      --out "$RES/trainer_step-olmo3-1b-cuda-flex.json"
    ;;
  e2e-8 | e2e-16)
    n=${s#e2e-}
    stage "$s" 100 python3 benchmarks/gpu/e2e.py --prompts "$n" --group 8 --new-tokens 256 \
      --collections $((n == 8 ? 4 : 3)) --publish tensor --label "dense-${n}x8"
    ;;
  trl-8 | trl-16)
    n=${s#trl-}
    stage "$s" 75 python3 benchmarks/trl_grpo.py --prompts "$n" --group 8 --new-tokens 256 --steps 2
    ;;
  long)
    stage long "${LONG_TIMEOUT:-240}" python3 benchmarks/gpu/long_context.py --contexts ${LONG_CONTEXTS:-16384 32768}
    ;;
  # ---- round three: sampling inside the captured step, warm-up outside the timed runs ----
  fused-test)  # the captured decode+sample graph against the eager step and sampler
    stage fused-test 150 python3 -m pytest -q -p no:cacheprovider tests/unit/test_engine_fused_sampling.py
    ;;
  decode3)
    # the sampler after the graph (the default) vs inside it (fused) vs 64-entry KV buckets, and
    # transformers' compiled static cache, same weights, one process
    stage decode3 420 python3 benchmarks/gpu/decode.py --batch-sizes 64 256 --prompt-len 128 \
      --new-tokens 256 --repeats 2 --variants graph,compile graph,compile,fused \
      graph,compile,kv_step=64 --hf static --deadline-s 380
    ;;
  e2e3-8 | e2e3-16)
    # after trl-N in the same call; the warm-up collection (compile + capture) is reported
    # apart, the compiler cache under /tmp/rlc-compile-cache carries to a later stage
    n=${s#e2e3-}
    stage "$s" 180 python3 benchmarks/gpu/e2e.py --prompts "$n" --group 8 --new-tokens 256 \
      --collections 4 --publish tensor --label "dense-${n}x8" --deadline-s 160
    ;;
  long16 | long32)
    ctx=$(( ${s#long} * 1024 ))
    stage "$s" 200 python3 benchmarks/gpu/long_context.py --contexts "$ctx"
    ;;
  startup)
    # cold (init cache and compiler cache empty), then warm (both hit): seconds from the
    # command to the first collection's start; the compiler cache's shared root is local
    # here (no shared storage on one machine), the init cache under RLC_CACHE_DIR
    rm -rf /tmp/rlc-startup-cache /tmp/rlc-cc
    cc='compiler_cache.shared_root="/tmp/rlc-cc/tmp-7d"'
    stage startup-cold 200 env RLC_CACHE_DIR=/tmp/rlc-startup-cache python3 benchmarks/gpu/startup.py \
      --label cold --timeout-s 180 --set "$cc"
    stage startup-warm 150 env RLC_CACHE_DIR=/tmp/rlc-startup-cache python3 benchmarks/gpu/startup.py \
      --label warm --timeout-s 130 --set "$cc"
    ;;
  # ---- round five: `rlc run --bench` (start-up breakdown, graphs captured up front) ----
  bench-cold | bench-warm | bench-warm-base | bench-warm-trainer | bench-warm-sequential | \
    bench-warm-engine-first)
    # `rlc run specs/examples/gpu-dense.toml --bench`; cold empties the init and compiler
    # caches first, warm reuses what the cold run left; no router (one engine).
    # warm-base: without the trainer's start-up warm-up (round six; warm-trainer = warm)
    # warm-sequential: the trainer built after the engines, not beside them (round eleven)
    # warm-engine-first: each engine reads its weights before it starts (round eleven)
    label=${s#bench-}
    [ "$label" = cold ] && rm -rf /tmp/rlc-startup-cache /tmp/rlc-cc
    tw=1; [ "$label" = warm-base ] && tw=0
    beside=1; [ "$label" = warm-sequential ] && beside=0
    defer=1; [ "$label" = warm-engine-first ] && defer=0
    root=/tmp/runs/dense-$label
    rm -rf "$root"
    stage "$s" "${BENCH_TIMEOUT:-240}" env RLC_CACHE_DIR=/tmp/rlc-startup-cache \
      RLC_TRAINER_WARMUP=$tw RLC_TRAINER_BESIDE_ENGINES=$beside \
      RLC_ENGINE_DEFER_WEIGHTS=$defer python3 -m rlc_cli.main \
      run specs/examples/gpu-dense.toml --no-progress --bench --set "output.root=\"$root\"" \
      --set 'compiler_cache.shared_root="/tmp/rlc-cc/tmp-7d"' --set inference.router=false \
      --set training.num_rollouts=3
    mkdir -p "$RES/bench/dense-$label"
    cp "$root"/{metrics.jsonl,startup.json,bench.json} "$RES/bench/dense-$label/" 2>/dev/null
    cp -r "$root/logs" "$RES/bench/dense-$label/" 2>/dev/null
    rm -rf "$root"  # its checkpoints (over 8 GB for gpu-dense) would fill the disk
    tar -cf "$OUT/results.tar" "$RES" 2>/dev/null
    ;;
  bench-moe)
    root=/tmp/runs/moe
    rm -rf "$root"
    stage "$s" "${BENCH_TIMEOUT:-200}" env RLC_CACHE_DIR=/tmp/rlc-startup-cache python3 -m rlc_cli.main \
      run specs/examples/gpu-moe.toml --no-progress --bench --set "output.root=\"$root\"" \
      --set 'compiler_cache.shared_root="/tmp/rlc-cc/tmp-7d"' \
      --set training.num_rollouts=3 ${MOE_ROUTER:+--set inference.router=$MOE_ROUTER}
    mkdir -p "$RES/bench/moe"
    cp "$root"/{metrics.jsonl,startup.json,bench.json} "$RES/bench/moe/" 2>/dev/null
    cp -r "$root/logs" "$RES/bench/moe/" 2>/dev/null
    rm -rf "$root"  # its checkpoints (over 8 GB for gpu-dense) would fill the disk
    tar -cf "$OUT/results.tar" "$RES" 2>/dev/null
    ;;
  trl5-256 | trl5-1024)
    n=${s#trl5-}
    stage "$s" "$(( n > 256 ? 240 : 90 ))" python3 benchmarks/trl_grpo.py --prompts 16 --group 8 \
      --new-tokens "$n" --steps 2 --out "$RES"
    ;;
  e2e5-256 | e2e5-1024)
    n=${s#e2e5-}
    stage "$s" "$(( n > 256 ? 200 : 150 ))" python3 benchmarks/gpu/e2e.py --prompts 16 --group 8 \
      --new-tokens "$n" --collections 3 --publish tensor --label "dense-16x8x$n${E2E_LABEL:-}" \
      --deadline-s "$(( n > 256 ? 185 : 135 ))" --out "$RES" ${E2E_ARGS:-}
    ;;
  e2e10-gc)  # 16x8x256 with the heap frozen after the warm-up (the default), then without
    stage e2e10-freeze 150 python3 benchmarks/gpu/e2e.py --prompts 16 --group 8 --new-tokens 256 \
      --collections 3 --publish tensor --label dense-16x8x256-freeze --deadline-s 135 --out "$RES"
    stage e2e10-nofreeze 150 python3 benchmarks/gpu/e2e.py --prompts 16 --group 8 \
      --new-tokens 256 --collections 3 --publish tensor --label dense-16x8x256-nofreeze \
      --no-freeze-heap --deadline-s 135 --out "$RES"
    ;;
  decode10)  # merged q/k/v and gate/up products (the default) against separate ones, and
    # 128-entry KV buckets (less attention padding, twice the graphs), with the kernel profile
    stage decode10 "${DECODE_TIMEOUT:-330}" python3 benchmarks/gpu/decode.py --batch-sizes 64 256 \
      --prompt-len 128 --new-tokens 256 --repeats 2 --kernel-profile --hf static \
      --variants graph,compile,fused graph,compile,fused,unfused graph,compile,fused,kv_step=128 \
      --deadline-s "$(( ${DECODE_TIMEOUT:-330} - 40 ))" --out "$RES"
    ;;
  decode11)  # what removes the bucket padding SDPA reads: 64-entry KV buckets (more graphs),
    # and FlexAttention compiled per batch size (each row reads its own blocks), kernel profile
    stage decode11 "${DECODE_TIMEOUT:-330}" python3 benchmarks/gpu/decode.py --batch-sizes 64 256 \
      --prompt-len 128 --new-tokens 256 --repeats 2 --kernel-profile --hf static \
      --variants graph,compile,fused graph,compile,fused,kv_step=64 graph,compile,fused,attn=flex \
      --deadline-s "$(( ${DECODE_TIMEOUT:-330} - 40 ))" --out "$RES"
    ;;
  triton-test)  # the split-KV Triton decode kernel: interpreter cases and the captured step on the GPU
    stage triton-test 200 python3 -m pytest -q -p no:cacheprovider tests/unit/test_engine_triton_decode.py -k gpu
    ;;
  decode-attn)  # decode attention alone: SDPA over the bucket against the kernel's exact rows
    stage decode-attn 150 python3 benchmarks/gpu/decode_attention.py --batch-sizes 64 256 --out "$RES"
    ;;
  decode13)  # the engine with the split-KV Triton kernel against SDPA's buckets (256 and 64)
    stage decode13 "${DECODE_TIMEOUT:-400}" python3 benchmarks/gpu/decode.py --batch-sizes 64 256 \
      --prompt-len 128 --new-tokens 256 --repeats 3 --kernel-profile --hf static \
      --variants graph,compile,fused graph,compile,fused,attn=triton graph,compile,fused,kv_step=64 \
      --deadline-s "$(( ${DECODE_TIMEOUT:-400} - 40 ))" --out "$RES"
    ;;
  decode14)  # the tuned split-KV kernel against SDPA's 256-entry buckets (kernel profile)
    stage decode14 "${DECODE_TIMEOUT:-280}" python3 benchmarks/gpu/decode.py --batch-sizes 64 256 \
      --prompt-len 128 --new-tokens 256 --repeats 3 --kernel-profile --hf static \
      --variants graph,compile,fused,attn=sdpa graph,compile,fused,attn=triton \
      --deadline-s "$(( ${DECODE_TIMEOUT:-280} - 30 ))" --out "$RES"
    ;;
  decode-b64)  # batch 64 only: the engine's default decode against transformers, best of 3 each
    stage decode-b64 240 python3 benchmarks/gpu/decode.py --batch-sizes 64 --prompt-len 128 \
      --new-tokens 256 --repeats 3 --hf static --variants graph,compile,fused,attn=triton \
      --deadline-s 200 --out "$RES"
    ;;
  decode15)  # the prefill's compiled regions (--compile-prefill) against the eager prefill
    # shellcheck disable=SC2086  # DECODE_BATCHES: batch sizes, space-separated
    stage decode15 "${DECODE_TIMEOUT:-300}" python3 benchmarks/gpu/decode.py --batch-sizes ${DECODE_BATCHES:-64 256} \
      --prompt-len 128 --new-tokens 256 --repeats 3 --hf static \
      --variants graph,compile,fused,attn=triton,compileprefill graph,compile,fused,attn=triton \
      --deadline-s "$(( ${DECODE_TIMEOUT:-300} - 30 ))" --out "$RES"
    ;;
  decode-gemm)  # the decode step's matrix products alone: cuBLAS against Inductor's autotuned choice
    stage decode-gemm "${GEMM_TIMEOUT:-240}" python3 benchmarks/gpu/decode_gemm.py \
      --batch-sizes ${DECODE_BATCHES:-64 256} --out "$RES"
    ;;
  decode17)  # the FP8 KV cache against the model's bf16 one, beside transformers' static cache
    # shellcheck disable=SC2086  # DECODE_BATCHES: batch sizes, space-separated
    stage decode17 "${DECODE_TIMEOUT:-300}" python3 benchmarks/gpu/decode.py --batch-sizes ${DECODE_BATCHES:-64 256} \
      --prompt-len 128 --new-tokens 256 --repeats 3 --hf static \
      --variants graph,compile,fused,attn=triton,compileprefill \
      graph,compile,fused,attn=triton,compileprefill,kv=fp8_e4m3 \
      --deadline-s "$(( ${DECODE_TIMEOUT:-300} - 30 ))" --out "$RES"
    ;;
  e2e17-*)  # 16xN collections with the KV cache in one type: e2e17-1024-fp8_e4m3, e2e17-256-auto
    rest=${s#e2e17-}
    n=${rest%%-*}
    kv=${rest#*-}
    # shellcheck disable=SC2086  # E2E_ARGS: extra flags, space-separated (--recompute)
    stage "$s" "${E2E_TIMEOUT:-280}" python3 benchmarks/gpu/e2e.py --prompts 16 --group 8 \
      --new-tokens "$n" --collections 3 --publish tensor --kv-cache-dtype "$kv" \
      --label "dense-16x8x$n-$kv${E2E_LABEL:-}" --deadline-s "$(( ${E2E_TIMEOUT:-280} - 15 ))" \
      --out "$RES" ${E2E_ARGS:-}
    ;;
  shared-test)  # a group's shared prompt on the GPU: the captured engine step against
    # copied prompts, and the kernel against SDPA
    stage shared-test 240 python3 -m pytest -q -p no:cacheprovider -k gpu \
      tests/unit/test_engine_shared_prompt.py tests/unit/test_engine_triton_decode.py
    ;;
  shared-attn)  # decode attention at 16x8, each prompt copied into its samples' rows
    # against read once from its group's slot, 256 and 1024 new tokens, bf16 and FP8
    # SHARED_KV / SHARED_NEW: the cache types and response lengths (default: all four)
    for kv in ${SHARED_KV:-auto fp8_e4m3}; do
      for n in ${SHARED_NEW:-256 1024}; do
        stage "shared-attn-$n-$kv" 120 python3 benchmarks/gpu/decode_attention.py \
          --batch-sizes 128 --group 8 --new-lens 1 "$n" --kv-dtype "$kv" --blocks 64 128 256 \
          --out "$RES" --label "16x8x$n-$kv"
      done
    done
    ;;
  checksum)  # the publication audit's device checksum: the Triton kernel against torch ops,
    # after the kernel's GPU test (its digest equals the CPU's)
    stage checksum-test 120 python3 -m pytest -q -p no:cacheprovider \
      tests/unit/test_publication_checksum_kernel.py
    stage checksum 120 python3 benchmarks/gpu/checksum.py --out "$RES"
    ;;
  prefill-test)  # the compiled prefill regions against eager on the GPU, bf16
    stage prefill-test 150 python3 -m pytest -q -p no:cacheprovider \
      tests/unit/test_engine_regional_compile.py -k cuda_prefill
    ;;
  prefill15)  # the prefill forward alone, eager against its compiled regions, 1.48B model
    stage prefill15 "${PREFILL_TIMEOUT:-150}" python3 benchmarks/prefill_compile.py \
      --shapes 64x128 64x128/r 256x128 16x512 16x128@512 --repeats 5 \
      --out "$RES/prefill_compile.json"
    ;;
  e2e14-sdpa | e2e14-triton)  # 16x8x256 collections with each decode attention
    stage "$s" 130 python3 benchmarks/gpu/e2e.py --prompts 16 --group 8 --new-tokens 256 \
      --collections 3 --publish tensor --label "dense-16x8x256-${s#e2e14-}" \
      --decode-attention "${s#e2e14-}" --deadline-s 115 --out "$RES"
    ;;
  e2e11-kv64)  # 16x8x256 with 64-entry KV buckets: the capture count and the collection
    stage e2e11-kv64 150 python3 benchmarks/gpu/e2e.py --prompts 16 --group 8 --new-tokens 256 \
      --collections 3 --publish tensor --label dense-16x8x256-kv64 --graph-kv-step 64 \
      --deadline-s 135 --out "$RES"
    ;;
  e2e14-1024)  # 16x8x1024 with time for three timed collections after a cold warm-up
    stage e2e14-1024 280 python3 benchmarks/gpu/e2e.py --prompts 16 --group 8 --new-tokens 1024 \
      --collections 3 --publish tensor --label dense-16x8x1024 --deadline-s 265 --out "$RES"
    ;;
  e2e13-prefill)  # is the prefill excess cuDNN building plans with an empty driver JIT
    # cache? 16x8x256, each process with its own empty CUDA_CACHE_PATH: everything cold with
    # prefill off cuDNN (the engine's default), then the compiler cache warm and cuDNN allowed
    rm -rf /tmp/rlc-compile-cache-13 /tmp/cuda-jit-13-*
    for label in nocudnn-cold cudnn-jitcold; do
      extra=; [ "$label" = cudnn-jitcold ] && extra=--prefill-cudnn
      export CUDA_CACHE_PATH=/tmp/cuda-jit-13-$label
      stage "e2e13-$label" 150 python3 benchmarks/gpu/e2e.py \
        --prompts 16 --group 8 --new-tokens 256 --collections 3 --publish tensor \
        --label "dense-16x8x256-$label" --compile-cache /tmp/rlc-compile-cache-13 \
        --sample-admission --deadline-s 135 --out "$RES" $extra
      unset CUDA_CACHE_PATH
    done
    ;;
  e2e12-prefill)  # the host-bound prefill of a cold-cache process's first collections:
    # 16x8x256 with an empty compiler cache, then with the cache it left (heap frozen in
    # both); the engine thread's stack is sampled during admissions, allocator counted
    rm -rf /tmp/rlc-compile-cache-12
    for label in cold warm; do
      stage "e2e12-$label" 150 python3 benchmarks/gpu/e2e.py --prompts 16 --group 8 \
        --new-tokens 256 --collections 3 --publish tensor --label "dense-16x8x256-$label" \
        --compile-cache /tmp/rlc-compile-cache-12 --sample-admission --deadline-s 135 --out "$RES"
    done
    ;;
  admission)  # what admitting a 16x8 collection costs the engine's host, and its rounds
    stage admission 200 python3 benchmarks/engine_admission.py --device cuda --source "$M1B" \
      --collections 3 --out "$RES"
    ;;
  # ---- round six: the MoE update on torch's grouped matrix product vs the capacity MLP ----
  moe-update)
    stage moe-update-grouped 240 python3 benchmarks/gpu/trainer_ranks.py --gpus 1 --moe
    stage moe-update-capacity 240 python3 benchmarks/gpu/trainer_ranks.py --gpus 1 --moe \
      --set 'model.source="builtin:smallmoe?dropless=0"'
    ;;
  moe-mlp)  # the expert MLP alone, one packed row of smallmoe's shape
    stage moe-mlp 120 python3 benchmarks/gpu/moe_mlp.py --tokens 8192 --experts 32 --top-k 4 \
      --d-model 768 --hidden 384
    ;;
  # ---- round seven: the trainer's blocks compiled; decode compiled by region ----
  trainer-compiled)
    # the trainer-flex step with every block and the LM head under torch.compile (both sides)
    stage trainer-compiled 320 python3 benchmarks/trainer_step.py --device cuda --model "$M1B" \
      --samples 32 --prompt-len 512 --response-len 1536 --packing-max-tokens 8192 --steps 3 \
      --warmup 2 --compile-blocks --out "$RES/trainer_step-olmo3-1b-cuda-compiled.json"
    ;;
  trainer-recompute)  # compiled blocks with activation recompute (OLMo-core's budget mode)
    stage trainer-recompute 320 python3 benchmarks/trainer_step.py --device cuda --model "$M1B" \
      --samples 32 --prompt-len 512 --response-len 1536 --packing-max-tokens 8192 --steps 3 \
      --warmup 2 --compile-blocks --recompute \
      --out "$RES/trainer_step-olmo3-1b-cuda-compiled-recompute.json"
    ;;
  decode7)
    # the default engine (graphs of the region-compiled step) against transformers' compiled
    # static cache, same weights, one process
    stage decode7 "${DECODE_TIMEOUT:-330}" python3 benchmarks/gpu/decode.py --batch-sizes 64 256 \
      --prompt-len 128 --new-tokens 256 --repeats 2 --variants graph,compile,fused --hf static \
      --deadline-s "$(( ${DECODE_TIMEOUT:-330} - 40 ))" --out "$RES"
    ;;
  decode8)  # the overlap schedule (the default) against reading each step before the next
    stage decode8 "${DECODE_TIMEOUT:-330}" python3 benchmarks/gpu/decode.py --batch-sizes 64 256 \
      --prompt-len 128 --new-tokens 256 --repeats 2 \
      --variants graph,compile,fused graph,compile,fused,nooverlap --hf static \
      --deadline-s "$(( ${DECODE_TIMEOUT:-330} - 40 ))" --out "$RES"
    ;;
  decode9)  # FlexAttention's block-sparse decode against SDPA over length buckets, with a
    # kernel-level profile of each (GPU ms per decode step by kernel and class)
    stage decode9 "${DECODE_TIMEOUT:-330}" python3 benchmarks/gpu/decode.py --batch-sizes 64 256 \
      --prompt-len 128 --new-tokens 256 --repeats 2 --kernel-profile \
      --variants graph,compile,fused graph,compile,fused,attn=flex --hf static \
      --deadline-s "$(( ${DECODE_TIMEOUT:-330} - 40 ))" --out "$RES"
    ;;
  flex-test)  # the captured flex decode against SDPA on the GPU, and the CPU cases
    stage flex-test 150 python3 -m pytest -q -p no:cacheprovider tests/unit/test_engine_flex_decode.py
    ;;
  olmoe-hf)
    stage olmoe-hf 420 bash benchmarks/gpu/olmoe_hf.sh
    ;;
  *)
    echo "unknown stage $s" | tee -a "$LOG"
    ;;
  esac
done
echo "=== done $(date -u +%H:%M:%S)" | tee -a "$LOG"
