#!/usr/bin/env bash
# Installs the Debian packages tandem's build, tests and fuzzing need, when missing.
# Idempotent: a machine that has everything is checked in well under a second.
# Not root: prints the exact apt-get line to run and exits 1.
set -euo pipefail

PACKAGES=(
  build-essential pkg-config git ca-certificates
  cmake                                # builds the engine (llama.cpp)
  libevent-dev libjansson-dev libfyaml-dev libssl-dev
  libcurl4-openssl-dev                 # tandem eval/drift talk to /v1/systemone endpoints
  libzstd-dev                          # serve accepts zstd request bodies (the TypeSafe SDK's default)
  libsqlite3-dev                       # the request store (store.path), export and --data store:
  libcriterion-dev                     # C unit tests
  clang libfuzzer-14-dev libclang-rt-14-dev   # fuzzing (make fuzz) and sanitizers
  python3 python3-venv python3-pip     # end-to-end tests run under pytest in a venv
  chromium                             # renders tandem eval's HTML report and drives /ui in the e2e tests
  chromium-driver                      # Selenium drives headless Chromium through it (tests/e2e/test_ui.py)
  haproxy                              # a scale-out front in the e2e tests (examples/scale-out/haproxy.cfg)
  prometheus                           # its promtool checks /metrics in the e2e tests (promtool check metrics)
  systemd                              # systemd-analyze security rates examples/tandem.service (tests/e2e/test_install.py)
)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} system packages present"
  exit 0
fi

cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages: ${missing[*]}" >&2
  echo "install-deps: run as root:  sudo apt-get update && sudo $cmd" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# shellcheck disable=SC2086
$cmd
