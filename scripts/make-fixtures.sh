#!/usr/bin/env bash
# Builds tandem's decision-model fixtures into $TANDEM_CACHE/fixtures/ with
# tandem's own tools (`tandem gguf set` on real models, `tandem gguf synth` from
# the specs in fixtures/). Deterministic: the same inputs give byte-identical
# files. Each fixture is rebuilt only when its recipe key changes: the sha256 of
# its inputs (spec or template files, source model, and the tandem binary).
# Usage: scripts/make-fixtures.sh [TANDEM_BINARY]   (default build/tandem)
set -euo pipefail
LOG_TAG=make-fixtures
. "$(dirname "$0")/lib.sh"

ROOT=$(cd "$SCRIPTS_DIR/.." && pwd)
TANDEM=${1:-$ROOT/build/tandem}
[[ -x "$TANDEM" ]] || die "$TANDEM not built: run make"
OUT="$TANDEM_CACHE/fixtures"
MODELS="$TANDEM_CACHE/models"
ENGINE_SRC="$TANDEM_CACHE/engine/b$ENGINE_BUILD/src"
export ENGINE_SRC
mkdir -p "$OUT"

# recipe_key FILE...: one sha256 over the tandem binary and the given input files.
recipe_key() {
  sha256sum "$TANDEM" "$@" | cut -d' ' -f1 | sha256sum | cut -d' ' -f1
}

# build NAME KEY COMMAND...: runs COMMAND (which must write $OUT/NAME.tmp) when
# the cached NAME.key differs from KEY, then renames into place.
build() {
  local name=$1 key=$2; shift 2
  if [[ -f "$OUT/$name" && "$(cat "$OUT/$name.key" 2>/dev/null)" == "$key" ]]; then
    log "cached: $OUT/$name"
    return 0
  fi
  rm -f "$OUT/$name.tmp"
  "$@" || die "building $name failed"
  mv -f "$OUT/$name.tmp" "$OUT/$name"
  echo "$key" >"$OUT/$name.key"
  log "built $OUT/$name ($(du -h --apparent-size "$OUT/$name" | cut -f1), $(du -h "$OUT/$name" | cut -f1) on disk)"
}

# decider NAME SOURCE TEMPLATE SET...: a real model plus label-logit metadata.
decider() {
  local name=$1 src=$2 template=$3; shift 3
  build "$name" "$(recipe_key "$src" "$template") $*" \
    "$TANDEM" gguf set "$src" "$OUT/$name.tmp" \
    "tokenizer.chat_template.systemone=file:$template" "$@"
}

# synth NAME SPEC: a model synthesized from a JSON spec in fixtures/.
synth() {
  local name=$1 spec=$2
  build "$name" "$(recipe_key "$spec")" "$TANDEM" gguf synth "$spec" "$OUT/$name.tmp"
}

T="$ROOT/fixtures/templates"
decider smollm2-decider.gguf "$MODELS/$SMOLLM2_GGUF" "$T/smollm2-systemone.jinja" \
  llama.decision.type=str:openjev
decider gemma3-decider.gguf "$MODELS/$GEMMA3_GGUF" "$T/gemma3-systemone.jinja" \
  gemma3.decision.type=str:openjev

for spec in "$ROOT"/fixtures/*.json; do
  [[ -e "$spec" ]] || continue
  synth "$(basename "$spec" .json).gguf" "$spec"
done
