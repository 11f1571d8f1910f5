#!/usr/bin/env bash
# Measure the default model's full-size architecture on this GPU (random weights, nothing
# downloaded) and write measurement CSVs that `rlsched profile fit` reads:
#   scripts/measure_gpu.sh OUT_DIR
# Qwen-Image with CFG as two sequential forwards (as vLLM-Omni runs it), eager and compiled,
# then FLUX.1-dev eager. About 5-8 minutes on one H100/H200. Copy a CSV into
# envs/profiles/measurements/NAME/measurements.csv, write its fit.yaml (stack from the CSV's
# `stack` column) and run `rlsched profile fit` to land the profile.
set -euo pipefail
out=${1:?usage: scripts/measure_gpu.sh OUT_DIR}
mkdir -p "$out"
rlsched=${RLSCHED:-rlsched}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt"
$rlsched profile measure --arch qwen-image --cfg --batch-sizes 1,2,4,8 --resolutions 512x512,1024x1024 \
  --repeats 3 --out "$out/qwen-image-eager.csv"
$rlsched profile measure --arch qwen-image --cfg --compile --batch-sizes 1,4 --resolutions 512x512,1024x1024 \
  --repeats 3 --out "$out/qwen-image-compile.csv"
$rlsched profile measure --arch flux --batch-sizes 1,4 --resolutions 512x512,1024x1024 \
  --repeats 3 --out "$out/flux-eager.csv"
