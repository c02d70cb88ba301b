#!/usr/bin/env bash
# The whole test suite: installs the test tools (Anvil, solc, Stripe's library), then runs
# every unit, property and black-box test of the workspace, then Schemathesis over the API.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x scripts/install-test-deps.sh ]; then
  scripts/install-test-deps.sh
fi
cargo test --workspace --all-targets
# The deterministic simulation of the whole appliance: 3 seeds x 20,000 steps,
# as many at a time as there are cores, on the binary the tests just built. Each prints its failures and its last
# line `seed S steps N digest HEX`; any failure fails the suite.
scripts/simulate.sh target/debug/appliance 20000 1 2 3
# Property-based contract tests: Schemathesis over every operation of the OpenAPI document,
# against a real test-mode server (bounded: fixed seed and examples per operation).
python3 scripts/schemathesis.py
# The hosted checkout page in a real browser (headless Chromium, Playwright, zxing-cpp,
# axe-core), against a real test-mode server. Screenshots in
# target/checkout-screenshots/.
python3 scripts/checkout_browser.py
