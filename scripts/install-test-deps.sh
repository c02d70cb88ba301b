#!/usr/bin/env bash
# Installs the test-only tools into ./node_modules from the pinned package.json /
# package-lock.json: Anvil (a local EVM node, npm @foundry-rs/anvil-linux-amd64) and the
# Solidity compiler (npm solc) that checks chains/contracts' pinned bytecode.
#
# Under npm 11 the anvil package's postinstall does not run, so nothing links a binary onto
# PATH: the tests call node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil directly.
# Tests that need Anvil or solc FAIL when they are missing (they are never skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v node >/dev/null || { echo "node is required (apt-get install nodejs npm)" >&2; exit 1; }
command -v npm >/dev/null || { echo "npm is required (apt-get install npm)" >&2; exit 1; }
if [ -f package-lock.json ]; then
  npm ci --no-audit --no-fund
else
  npm install --no-audit --no-fund
fi
ANVIL=node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil
chmod +x "$ANVIL" 2>/dev/null || true
"$ANVIL" --version | head -1
node -e 'console.log("solc " + require("solc").version())'

# Stripe's own library verifies our webhook signatures in the webhook tests (DECISIONS.md
# section 7: Stripe-compatible scheme). Pinned; installed for the user running the tests.
STRIPE_VERSION=$(cat scripts/stripe-version.txt)
if ! python3 -c "import stripe, sys; sys.exit(0 if stripe.VERSION == '$STRIPE_VERSION' else 1)" 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check "stripe==$STRIPE_VERSION"
fi
python3 -c 'import stripe; print("stripe (python) " + stripe.VERSION)'
