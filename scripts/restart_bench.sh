#!/bin/sh
# Restart benchmark on a large store (docs/performance.md, "Restart and memory"). Not part
# of CI: it writes gigabytes.
#
#   cargo build --release -p appliance -p loadgen --bins --example fill_store
#   (`--bins` is needed: `--example` alone selects only the example, leaving the server and
#   loadgen binaries as they were)
#   scripts/restart_bench.sh DATA_DIR DEPOSITS [fill_store options...]
#
# 1. On a data dir that has no store yet, starts `appliance --test` once (bootstraps the test
#    project; its first stdout, with the keys, is kept in DATA_DIR.keys) and stops it.
# 2. Fills the data dir up to DEPOSITS confirmed test deposits in all (a data dir that
#    already holds some is topped up: `--deposits` is what is added, so pass the difference)
#    with examples/fill_store.rs (stops early at 12 GB of store or 15 GB free on the disk).
# 3. Runs `loadgen --restart-bench --restart-data-dir DATA_DIR`: first start, write load,
#    kill -9, restart (time to /readyz, peak RSS), reads, SIGTERM, clean restart.
#    Set APPLIANCE_STORAGE__QUICK_REPAIR=false in the environment to compare without redb's
#    quick-repair (the killed server must have run with the same setting).
#
# The data dir is kept; remove it when done.
set -eu
dir=$1
deposits=$2
shift 2
bin=target/release
keys="$dir.keys"
if [ ! -e "$dir/appliance.redb" ]; then
    mkdir -p "$dir"
    : >"$keys"
    "$bin/appliance" --test --listen 127.0.0.1:0 --data-dir "$dir" >"$keys" 2>"$dir.first.err" &
    pid=$!
    i=0
    until grep -q "wallet key:" "$keys" && grep -q "listening on" "$keys"; do
        i=$((i + 1))
        [ $i -lt 600 ] || { echo "the server printed no keys" >&2; kill $pid; exit 1; }
        sleep 0.1
    done
    kill -TERM $pid
    wait $pid || true
fi
key() { sed -n "s/.*$1 key: \(apktest[0-9a-f]*\).*/\1/p" "$keys" | head -1; }
if [ "$deposits" -gt 0 ]; then
    "$bin/examples/fill_store" --data-dir "$dir" --deposits "$deposits" "$@"
fi
"$bin/loadgen" --bin "$bin/appliance" --restart-bench --restart-data-dir "$dir" \
    --wallet-token "$(key wallet)" --payout-token "$(key payout)" \
    --checkout-token "$(key checkout)" --clients 32 --load-seconds 5 \
    --ready-timeout-s 600 --json "$dir.restart.json"
