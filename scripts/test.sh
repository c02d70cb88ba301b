#!/usr/bin/env bash
# The whole test suite: installs the test tools (Anvil, solc, Stripe's library), then runs
# every unit, property and black-box test of the workspace, then Schemathesis over the API.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x scripts/install-test-deps.sh ]; then
  scripts/install-test-deps.sh
fi
cargo test --workspace --all-targets
# Property-based contract tests: Schemathesis over every operation of the OpenAPI document,
# against a real test-mode server (bounded: fixed seed and examples per operation).
python3 scripts/schemathesis.py
# The hosted checkout page in a real browser (headless Chromium, Playwright, zxing-cpp,
# axe-core; issue 13), against a real test-mode server. Screenshots in
# target/checkout-screenshots/.
python3 scripts/checkout_browser.py
