#!/usr/bin/env bash
# What one check costs on each emulated board, in guest instructions, beside the bucket
# firmware authors write by hand (src/cost.rs): granted, denied, and denied with `retry_after`
# read, on the 32-bit word and (Cortex-M3) the 64-bit word, in a program with one call site of
# each bucket's check and in one with six. qemu runs with `-icount shift=0`, so an instruction
# is a nanosecond of virtual time and the figures are exact and the same every run. Then the
# .text that `try_acquire` with `retry_after` adds to a minimal program on each board
# (size-bucket-retry less size-baseline).
#
#   examples/firmware/cost.sh                  # the three boards
#   examples/firmware/cost.sh thumbv6m-none-eabi
#
# Fails if any figure is above its bound (granted <= 1.25 x naive, denied <= naive, denied +
# retry_after <= 2 x naive's) or the .text is above 1 KiB. Needs what run.sh needs
# (qemu-system-arm, the three rustup targets), and llvm-size from rustup's llvm-tools or the
# system's LLVM.
set -euo pipefail
cd "$(dirname "$0")"

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(thumbv7m-none-eabi thumbv6m-none-eabi thumbv7em-none-eabihf)
fi
limit=1024

bin_dir="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin"
if [ -x "$bin_dir/llvm-size" ]; then
  llvm_size="$bin_dir/llvm-size"
else
  llvm_size=$(command -v llvm-size || true)
fi

machine() {
  case "$1" in
    thumbv7m-none-eabi) echo "-cpu cortex-m3 -machine lm3s6965evb" ;;
    thumbv6m-none-eabi) echo "-cpu cortex-m0 -machine microbit" ;;
    thumbv7em-none-eabihf) echo "-cpu cortex-m4 -machine mps2-an386" ;;
  esac
}
text() { "$llvm_size" -A "$1" | awk '$1 == ".text" { print $2 }'; }

failed=0
sizes=()
for target in "${targets[@]}"; do
  echo "=== $target"
  cargo build --quiet --release --target "$target" \
    --bin cost-one --bin cost-many --bin size-baseline --bin size-bucket-retry
  out="target/$target/release"
  for bin in cost-one cost-many; do
    log=$(mktemp)
    status=0
    # shellcheck disable=SC2046 # the machine's options are meant to split
    timeout "${FIRMWARE_TIMEOUT:-120}" qemu-system-arm $(machine "$target") \
      -icount shift=0,align=off,sleep=off -semihosting-config enable=on,target=native \
      -nographic -kernel "$out/$bin" >"$log" 2>/dev/null || status=$?
    cat "$log"
    if [ "$status" -ne 0 ] || ! grep -q "^cost: PASS" "$log" || grep -q -e FAIL -e panic "$log"; then
      echo "--- $target $bin: FAIL (exit status $status)"
      failed=1
    fi
    rm -f "$log"
  done
  if [ -n "$llvm_size" ]; then
    added=$(( $(text "$out/size-bucket-retry") - $(text "$out/size-baseline") ))
    verdict=PASS
    if [ "$added" -gt "$limit" ]; then verdict=FAIL; failed=1; fi
    sizes+=("$(printf "%-24s try_acquire + retry_after: %5d bytes of .text (bound %d): %s" "$target" "$added" "$limit" "$verdict")")
  else
    echo "llvm-size not found: install rustup's llvm-tools (rustup component add llvm-tools)"
    failed=1
  fi
done
echo
echo "=== .text over size-baseline (opt-level s, LTO)"
printf '%s\n' "${sizes[@]}"
if [ "$failed" -ne 0 ]; then
  echo "cost: FAIL"
fi
exit $failed
