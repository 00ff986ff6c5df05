# Shared helpers for tandem's fetch and build scripts. Source it; do not run it.
# Every download is pinned by sha256 (scripts/pins.env) and lands in the cache
# only after it verifies; partial files never carry a final name.

SCRIPTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=pins.env
. "$SCRIPTS_DIR/pins.env"

TANDEM_CACHE=${TANDEM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tandem}
DOWNLOADS="$TANDEM_CACHE/downloads"

log() { echo "${LOG_TAG:-tandem}: $*"; }
die() { echo "${LOG_TAG:-tandem}: error: $*" >&2; exit 1; }

# sha256_ok FILE SHA256: true when FILE exists and hashes to SHA256.
sha256_ok() {
  [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]
}

# pypi_fetch SPEC FILE SHA256 [sdist]: makes $DOWNLOADS/FILE hold the verified
# PyPI artifact SPEC (e.g. "pkg==1.0"). With "sdist", only the source
# distribution is accepted. Reuses a verified cached copy without any network.
pypi_fetch() {
  local spec=$1 file=$2 sha=$3 kind=${4:-any}
  local dest="$DOWNLOADS/$file"
  if sha256_ok "$dest" "$sha"; then return 0; fi
  mkdir -p "$DOWNLOADS"
  local tmp
  tmp=$(mktemp -d "$DOWNLOADS/.fetch.XXXXXX")
  local args=(download --no-deps --disable-pip-version-check -d "$tmp")
  # --no-binary on the package alone: ':all:' would also force its build
  # dependencies (cmake, ninja) to be compiled from source, which costs minutes.
  [[ $kind == sdist ]] && args+=(--no-binary "${spec%%==*}")
  log "fetching $spec from PyPI"
  if ! python3 -m pip "${args[@]}" "$spec" >"$tmp/pip.log" 2>&1; then
    cat "$tmp/pip.log" >&2
    rm -rf "$tmp"
    die "pip download $spec failed"
  fi
  if [[ ! -f "$tmp/$file" ]]; then
    rm -rf "$tmp"
    die "pip download $spec did not produce $file"
  fi
  local got
  got=$(sha256sum "$tmp/$file" | cut -d' ' -f1)
  if [[ "$got" != "$sha" ]]; then
    rm -rf "$tmp"
    die "$file: sha256 mismatch: expected $sha, got $got"
  fi
  mv -f "$tmp/$file" "$dest"
  rm -rf "$tmp"
}
