#!/usr/bin/env bash
# Builds the firmware for each emulated board, runs it under qemu-system-arm and fails if a run
# reports a failure (semihosting exit status), hangs (timeout), or lacks an expected line.
#
#   examples/firmware/run.sh                  # all three boards, and the embassy firmware on two
#   examples/firmware/run.sh thumbv6m-none-eabi
#
# Needs qemu-system-arm and the three rustup targets. The runners (with -icount) are in
# .cargo/config.toml; a run takes a few seconds. qemu's lm3s6965evb model prints "Timer with
# period zero, disabling" at start-up by itself, before any firmware runs: it is harmless.
set -euo pipefail
cd "$(dirname "$0")"

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(thumbv7m-none-eabi thumbv6m-none-eabi thumbv7em-none-eabihf)
fi

# Lines every run must print. The emulated time is deterministic (-icount), so the table's
# instants are exact.
expected=(
  "request  1 at 0.000 s: ALLOWED"
  "request  2 at 0.200 s: ALLOWED"
  "request  3 at 0.400 s: ALLOWED"
  "request  4 at 0.600 s: ALLOWED"
  "request  5 at 0.800 s: ALLOWED"
  "request  6 at 1.000 s: ALLOWED"
  "request  7 at 1.200 s: ALLOWED"
  "request  8 at 1.400 s: BLOCKED"
  "request  9 at 1.600 s: ALLOWED"
  "request 10 at 1.800 s: BLOCKED"
  "request 11 at 2.000 s: ALLOWED"
  "request 12 at 2.200 s: BLOCKED"
  "six at once: Err(ExceedsCapacity { burst: 5 })"
  "twelve requests: 12 of 12 as the design's table: ok"
  "blocking waits: ok"
  "exceeded 0 times: ok"
  "every token accrued was granted (within 2 of the bound): ok"
  "contention, 32-bit word: ok"
  "keyed table: ok"
  "PASS"
)

failed=0
for target in "${targets[@]}"; do
  echo "=== $target"
  cargo build --release --target "$target" --bin tollgate-firmware
  log=$(mktemp)
  status=0
  # qemu exits with the firmware's semihosting status; 124 is the timeout.
  timeout "${FIRMWARE_TIMEOUT:-120}" cargo run --quiet --release --target "$target" --bin tollgate-firmware \
    >"$log" 2>&1 || status=$?
  cat "$log"
  problems=()
  if [ "$status" -eq 124 ]; then
    problems+=("timed out")
  elif [ "$status" -ne 0 ]; then
    problems+=("exit status $status")
  fi
  if grep -q -e FAILED -e panic "$log"; then problems+=("a check failed"); fi
  for line in "${expected[@]}"; do
    grep -qF -- "$line" "$log" || problems+=("missing line: $line")
  done
  # The Cortex-M3 also runs buckets on the 64-bit word (tollgate's `word64`), one of them taken
  # from the SysTick handler while the main loop uses it.
  if [ "$target" = thumbv7m-none-eabi ]; then
    grep -q -- "^64-bit word .*: ok" "$log" || problems+=("missing line: 64-bit word ... ok")
    grep -qF -- "contention, 64-bit word: ok" "$log" || problems+=("missing line: contention, 64-bit word: ok")
  fi
  rm -f "$log"
  if [ ${#problems[@]} -eq 0 ]; then
    echo "--- $target: ok"
  else
    printf -- "--- $target: %s\n" "${problems[@]}"
    failed=1
  fi
done
# The embassy firmware (`src/bin/embassy.rs`): tasks on embassy-executor waiting through
# tollgate's `EmbassyWait`, on the Cortex-M3 and the Cortex-M4F only.
embassy_expected=(
  "twelve requests: 12 of 12 as the design's table: ok"
  "six at once, waited for: Err(ExceedsCapacity { burst: 5 })"
  "waits given up: ok"
  "keyed table shared with the handler: ok"
  "contention: ok"
  "one wake per waiter: ok"
  "burst of one at the rate: ok"
  "overload with callers giving up: ok"
  "PASS"
)
for target in "${targets[@]}"; do
  case "$target" in thumbv7m-none-eabi | thumbv7em-none-eabihf) ;; *) continue ;; esac
  echo "=== $target (embassy)"
  cargo build --release --features embassy --target "$target" --bin tollgate-embassy
  log=$(mktemp)
  status=0
  timeout "${FIRMWARE_TIMEOUT:-120}" cargo run --quiet --release --features embassy --target "$target" \
    --bin tollgate-embassy >"$log" 2>&1 || status=$?
  cat "$log"
  problems=()
  if [ "$status" -eq 124 ]; then
    problems+=("timed out")
  elif [ "$status" -ne 0 ]; then
    problems+=("exit status $status")
  fi
  if grep -q -e FAILED -e panic "$log"; then problems+=("a check failed"); fi
  for line in "${embassy_expected[@]}"; do
    grep -qF -- "$line" "$log" || problems+=("missing line: $line")
  done
  rm -f "$log"
  if [ ${#problems[@]} -eq 0 ]; then
    echo "--- $target (embassy): ok"
  else
    printf -- "--- $target (embassy): %s\n" "${problems[@]}"
    failed=1
  fi
done
exit $failed
