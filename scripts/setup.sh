#!/usr/bin/env bash
# Installs every Debian package moengine needs to build, test and benchmark.
# Idempotent: packages already present are skipped quickly.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  curl                                # the demo's API requests
  iproute2                            # network namespaces for the two-host P/D test
  clang libclang-rt-14-dev            # libFuzzer targets
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev
  libyaml-cpp-dev                     # topology files of moengine launch
  libxxhash-dev libpcre2-dev libicu-dev
  libboost1.81-dev                    # Asio + Beast: the HTTP server and client
  libucx-dev                          # KV transfer between prefill and decode instances
  libzmq3-dev cppzmq-dev              # KV events from the engines to the proxy
  nginx-light                         # the peer of bench/proxy_overhead (a plain reverse proxy)
  libopenmpi-dev openmpi-bin          # expert parallelism: the EP group's collectives, mpirun
  openssh-client openssh-server       # launch's remote hosts; the multi-host test runs an sshd per namespace
  chromium                            # the dashboard's browser test (headless)
)

sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

# Node.js runs the reference tools that the tests take from the npm registry. The machines
# ship it (with npm) from their own source; install Debian's only where it is absent.
if ! command -v npm >/dev/null 2>&1; then
  echo "setup: installing nodejs and npm"
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends nodejs npm
fi

# The npm packages the conformance tests compare against (pinned by package-lock.json).
"$(dirname "$0")/setup-npm.sh"
