#!/usr/bin/env bash
# Install the MCP clients of tests/test_mcp_conformance.py (the MCP conformance suite, the MCP
# Inspector CLI and the Node 22 binary they run on) from package-lock.json with `npm ci`.
# Idempotent: skipped when node_modules was installed from the same package.json and lockfile.
set -euo pipefail
cd "$(dirname "$0")"

stamp=node_modules/.ldims-installed
want="$(cat package.json package-lock.json | sha256sum | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] && node_modules/.bin/node --version >/dev/null 2>&1; then
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  echo "tests/mcp_clients/install.sh: npm is needed (the machine's Node.js + npm)" >&2
  exit 1
fi
rm -f "$stamp"
npm ci --no-audit --no-fund --loglevel=error
# The conformance suite needs Node >= 22 (fs.globSync): check the pinned binary really landed.
node_modules/.bin/node -e 'if (+process.versions.node.split(".")[0] < 22) process.exit(1)'
echo "$want" >"$stamp"
