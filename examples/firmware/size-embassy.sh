#!/usr/bin/env bash
# The async path's cost on thumbv7em-none-eabihf (opt-level s, LTO): three embassy binaries,
# one task each, on the same SysTick time driver. size-embassy-retry is the loop an embassy app
# writes by hand (try_acquire, then Timer::after(retry_after)); size-embassy-wait takes through
# tollgate's EmbassyWait::acquire (the waiters' line, its timer future and the ordered wait).
# Prints each binary's sections, the wait's .text and RAM over the hand-written loop, and the
# waiters' line's RAM (the `LINE` static).
set -euo pipefail
cd "$(dirname "$0")"
target=thumbv7em-none-eabihf
bin_dir="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin"
if [ -x "$bin_dir/llvm-size" ]; then
  llvm_size="$bin_dir/llvm-size"
  llvm_nm="$bin_dir/llvm-nm"
else
  llvm_size=$(command -v llvm-size)
  llvm_nm=$(command -v llvm-nm)
fi
bins=(size-embassy-baseline size-embassy-retry size-embassy-wait)
cargo build --quiet --release --features embassy --target "$target" $(printf -- "--bin %s " "${bins[@]}")
out="target/$target/release"
sections() {
  "$llvm_size" -A "$1" | awk '
    $1 == ".text" { t = $2 } $1 == ".rodata" { r = $2 } $1 == ".data" { d = $2 } $1 == ".bss" { b = $2 }
    END { print t + 0, r + 0, d + 0, b + 0 }'
}
printf "%-36s %7s %7s %7s %7s\n" binary .text .rodata .data .bss
for bin in "${bins[@]}"; do
  read -r t r d b < <(sections "$out/$bin")
  printf "%-36s %7d %7d %7d %7d\n" "$bin" "$t" "$r" "$d" "$b"
done
read -r rt rr rd rb < <(sections "$out/size-embassy-retry")
read -r wt wr wd wb < <(sections "$out/size-embassy-wait")
printf "%-36s %7d %7d %7d %7d\n" "delta: EmbassyWait over the retry loop" $((wt - rt)) $((wr - rr)) $((wd - rd)) $((wb - rb))
line_hex=$("$llvm_nm" -S --defined-only "$out/size-embassy-wait" | awk '$4 ~ /wait4line4LINE/ { print $2 }')
echo "waiters' line (LINE_CAPACITY places, every limit's waiters): $((16#$line_hex)) bytes of .bss"
