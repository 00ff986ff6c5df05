#!/usr/bin/env bash
# Runs bench/determinism_bench.py on a GPU machine with a CUDA engine (--ngl 99) and
# writes its table, raw JSON and log under $OUT (default ./gpu-out). Self-contained:
# it needs bash, python3 (standard library only), coreutils and the NVIDIA driver;
# nothing is fetched and no tandem cache is read.
#
#   bench/gpu_determinism.sh ENGINE FIXTURES [determinism_bench.py options...]
#
# ENGINE: a CUDA engine folder (bin/llama-server, optional BUILD-INFO, optional lib/
#   with shared libraries the binary or tandem needs), or a tarball of one (.tar,
#   .tar.gz, .tar.xz), e.g. made from the cache of `scripts/build-engine.sh` with CUDA=1.
# FIXTURES: a folder with smollm2-decider.gguf, or with its pieces
#   smollm2-decider.gguf.part-* (joined in name order: the file is larger than the
#   device machine's 64 MiB per call), and optionally smollm2-decider.gguf.sha256
#   (`sha256sum` output) to check the file against.
# TANDEM (environment): the tandem binary (default build/tandem); shared libraries in
#   a lib/ folder beside it are put on its library path alone (not on python's). When
#   it is missing or does not run here (`tandem --version` fails, e.g. a missing shared
#   library), the "tandem default" row is left out and the rest is measured.
# Any further options go to determinism_bench.py (e.g. --cases 24, --only ...).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 2 ]] || { sed -n '2,20p' "$0"; exit 2; }
ENGINE_ARG=$1 FIXTURES=$2
shift 2
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/gpu-determinism.XXXXXX)
say() { echo "gpu_determinism: $*" >&2; }

# the engine: a folder, or a tarball unpacked into $WORK/engine
if [[ -d "$ENGINE_ARG" ]]; then
  ENGINE_DIR=$(cd "$ENGINE_ARG" && pwd)
else
  mkdir -p "$WORK/engine"
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    "$ENGINE_ARG" "$WORK/engine"
  ENGINE_DIR=$WORK/engine
fi
SERVER=$(find "$ENGINE_DIR" -name llama-server -type f | head -n1)
[[ -n "$SERVER" ]] || { say "no llama-server under $ENGINE_ARG"; exit 1; }
chmod +x "$SERVER"
for d in "$ENGINE_DIR/lib" "$(dirname "$SERVER")" /usr/local/cuda/lib64 /usr/local/nvidia/lib64; do
  [[ -d "$d" ]] && LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
export LD_LIBRARY_PATH
if [[ -f "$ENGINE_DIR/BUILD-INFO" ]]; then
  grep -q '^backend=cuda' "$ENGINE_DIR/BUILD-INFO" || say "warning: BUILD-INFO does not say backend=cuda"
fi
if ldd "$SERVER" | grep 'not found'; then
  say "llama-server lacks the shared libraries above: put them in $ENGINE_DIR/lib"
  exit 1
fi
"$SERVER" --version 2>&1 | tee "$OUT/engine-version.txt"
"$SERVER" --list-devices 2>&1 | tee -a "$OUT/engine-version.txt" || true
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$OUT/gpu.txt" || true

# the fixture: the file, or its pieces joined
FIX=$FIXTURES/smollm2-decider.gguf
if [[ ! -f "$FIX" ]]; then
  parts=("$FIXTURES"/smollm2-decider.gguf.part-*)
  [[ -f "${parts[0]}" ]] || { say "no smollm2-decider.gguf (or .part-*) in $FIXTURES"; exit 1; }
  say "joining ${#parts[@]} pieces of smollm2-decider.gguf"
  cat "${parts[@]}" > "$WORK/smollm2-decider.gguf"
  FIX=$WORK/smollm2-decider.gguf
fi
if [[ -f "$FIXTURES/smollm2-decider.gguf.sha256" ]]; then
  want=$(cut -d' ' -f1 < "$FIXTURES/smollm2-decider.gguf.sha256")
  got=$(sha256sum "$FIX" | cut -d' ' -f1)
  [[ "$want" == "$got" ]] || { say "smollm2-decider.gguf: sha256 $got, expected $want"; exit 1; }
fi

TANDEM=${TANDEM:-build/tandem}
if [[ -x "$TANDEM" && -d "$(dirname "$TANDEM")/lib" ]]; then
  # a wrapper, so that the libraries carried for tandem reach tandem (and its engine
  # children, which need none of them) but not python3
  real=$(cd "$(dirname "$TANDEM")" && pwd)/$(basename "$TANDEM")
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
    "$(dirname "$real")" "$real" > "$WORK/tandem"
  chmod +x "$WORK/tandem"
  TANDEM=$WORK/tandem
fi
if [[ -x "$TANDEM" ]] && "$TANDEM" --version >/dev/null 2>"$WORK/tandem.err"; then
  tandem_arg=(--tandem "$TANDEM")
else
  say "no runnable tandem ($TANDEM): the tandem row is left out"
  [[ -s "$WORK/tandem.err" ]] && cat "$WORK/tandem.err" >&2
  tandem_arg=(--tandem '')
fi

set -o pipefail
PYTHONUNBUFFERED=1 python3 bench/determinism_bench.py "${tandem_arg[@]}" \
  --engine "$SERVER" --fixture "$FIX" --ngl 99 --quiet-wait 0 \
  --out "$OUT/determinism.md" --raw "$OUT/determinism.json" "$@" 2>&1 | tee "$OUT/determinism.log"
rm -rf "$WORK"
