#!/usr/bin/env bash
# The whole test suite: installs the test tools (Anvil, solc, Stripe's library), then runs
# every unit, property and black-box test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x scripts/install-test-deps.sh ]; then
  scripts/install-test-deps.sh
fi
cargo test --workspace --all-targets
