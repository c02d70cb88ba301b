#!/usr/bin/env bash
# Installs the test-only tools into ./node_modules from the pinned package.json /
# package-lock.json: Anvil (a local EVM node, npm @foundry-rs/anvil-linux-amd64) and the
# Solidity compiler (npm solc) that checks chains/contracts' pinned bytecode, axe-core
# (npm, the checkout page's accessibility check), and the published Uniswap V2/V3 contracts
# (npm @uniswap/v2-core, v2-periphery, v3-core, v3-periphery) whose bytecode the conversion
# tests deploy on Anvil (tests/evm/dex.rs), and bitcore-lib-doge, the independent
# implementation the dogecoin addresses are checked against (signer/tests/dogecoin.rs). Then Python's
# Schemathesis and openapi-spec-validator (the API contract run), and the operations tests' tools (tests/ops): Python prometheus_client (the reference parser of
# the /metrics text), systemd-analyze (the unit's security score), util-linux
# unshare/setpriv (the sandbox imitation) and cargo-deb (the Debian package).
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

# The reference Prometheus text parser for the /metrics tests (tests/ops). Pinned.
PROM_CLIENT_VERSION=0.21.1
if ! python3 -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('prometheus_client') == '$PROM_CLIENT_VERSION' else 1)" 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check "prometheus_client==$PROM_CLIENT_VERSION"
fi
python3 -c 'import importlib.metadata as m; print("prometheus_client (python) " + m.version("prometheus_client"))'

# Schemathesis runs property-based contract tests over every operation of the OpenAPI
# document (scripts/schemathesis.py); openapi-spec-validator validates the document
# against the OpenAPI 3.1 schema. Both pinned.
SCHEMATHESIS_VERSION=4.32.5
OPENAPI_SPEC_VALIDATOR_VERSION=0.9.0
if ! python3 -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('schemathesis') == '$SCHEMATHESIS_VERSION' and m.version('openapi-spec-validator') == '$OPENAPI_SPEC_VALIDATOR_VERSION' else 1)" 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check \
    "schemathesis==$SCHEMATHESIS_VERSION" "openapi-spec-validator==$OPENAPI_SPEC_VALIDATOR_VERSION"
fi
python3 -m schemathesis.cli --version

# systemd-analyze rates packaging/appliance.service (tests/ops/systemd.rs); unshare and
# setpriv (util-linux) imitate the unit's sandbox; dpkg-deb unpacks the package.
missing=""
command -v systemd-analyze >/dev/null || missing="$missing systemd"
command -v unshare >/dev/null && command -v setpriv >/dev/null || missing="$missing util-linux"
command -v dpkg-deb >/dev/null || missing="$missing dpkg"
# litecoind: the UTXO node of the bitcoin and dogecoin tests (regtest; chains/tests/utxo_node.rs).
[ -x /usr/lib/litecoin/litecoind ] || missing="$missing litecoind"
if [ -n "$missing" ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq $missing
fi
systemd-analyze --version | head -1

# cargo-deb builds the Debian package in tests/ops/deb.rs (from the binary already built).
# Pinned; compiles for a few minutes, only when missing or another version.
CARGO_DEB_VERSION=3.8.0
if ! cargo deb --version 2>/dev/null | grep -q " $CARGO_DEB_VERSION\$"; then
  cargo install --locked cargo-deb --version "$CARGO_DEB_VERSION"
fi
cargo deb --version; echo

# The hosted checkout page's browser test (scripts/checkout_browser.py): Debian's
# headless Chromium (Playwright's own browser download is not used; it is driven through
# `executable_path`), Playwright for Python, zxing-cpp to decode QR codes from screenshots
# and Pillow to read them. Python packages pinned.
if ! command -v chromium-headless-shell >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium-headless-shell
fi
chromium-headless-shell --version 2>/dev/null | head -1 || true
PLAYWRIGHT_VERSION=1.65.2
ZXING_CPP_VERSION=3.1.1
PILLOW_VERSION=13.0.0
if ! python3 -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('playwright') == '$PLAYWRIGHT_VERSION' and m.version('zxing-cpp') == '$ZXING_CPP_VERSION' and m.version('pillow') == '$PILLOW_VERSION' else 1)" 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check \
    "playwright==$PLAYWRIGHT_VERSION" "zxing-cpp==$ZXING_CPP_VERSION" "pillow==$PILLOW_VERSION"
fi
python3 -c 'import importlib.metadata as m; print("playwright " + m.version("playwright") + ", zxing-cpp " + m.version("zxing-cpp") + ", pillow " + m.version("pillow"))'
node -e 'console.log("axe-core " + require("axe-core/package.json").version)'
