#!/usr/bin/env bash
# Build and tag the runtime image that runtime.lock.json names, with the lock's versions.
#   bash docker/build.sh            build and tag image.docker
#   bash docker/build.sh --push     also push it and upload it to Beaker as image.beaker
#   bash docker/build.sh --print    only print the commands
# Run from the checkout's root (the build context is the checkout).
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-build}"
read -r DOCKER_TAG BEAKER_NAME TORCH OLMO_CORE SGLANG ROUTER < <(python3 - <<'PY'
import json
lock = json.load(open("runtime.lock.json"))
s = lock["sources"]
print(lock["image"]["docker"], lock["image"]["beaker"], s["torch"]["version"],
      s["olmo_core"]["version"], s["sglang"]["version"], s["sglang_router"]["version"])
PY
)
REVISION="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
build=(docker build -f docker/Dockerfile
  --build-arg "TORCH_VERSION=${TORCH}"
  --build-arg "OLMO_CORE_VERSION=${OLMO_CORE}"
  --build-arg "SGLANG_VERSION=${SGLANG}"
  --build-arg "SGLANG_ROUTER_VERSION=${ROUTER}"
  --build-arg "RLC_REVISION=${REVISION}"
  -t "${DOCKER_TAG}" .)
# beaker image create takes the image's name within the account or workspace
push=(docker push "${DOCKER_TAG}")
upload=(beaker image create --name "${BEAKER_NAME#*/}" "${DOCKER_TAG}")
case "$mode" in
  --print) printf '%q ' "${build[@]}"; echo; printf '%q ' "${push[@]}"; echo
           printf '%q ' "${upload[@]}"; echo ;;
  build) "${build[@]}" ;;
  --push) "${build[@]}" && "${push[@]}" && "${upload[@]}" ;;
  *) echo "usage: bash docker/build.sh [--print|--push]" >&2; exit 2 ;;
esac
