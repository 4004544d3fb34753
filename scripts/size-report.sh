#!/usr/bin/env bash
# What tollgate costs in firmware: .text, .rodata, .data and .bss of a minimal
# thumbv7em-none-eabihf binary with one `static` bucket calling `try_acquire`, minus the same
# binary without the bucket, and the RAM of one bucket. The binaries are in examples/firmware
# (src/bin/size_*.rs), built with its release profile (LTO, one codegen unit) at each opt-level
# given (default: s, the firmware's own, then z and 3).
#
#   scripts/size-report.sh          # s z 3
#   scripts/size-report.sh s
#
# Fails if the bucket adds more than 1 KiB of .text at any opt-level; if, with `retry_after`
# read too, it adds more than 1 KiB at an opt-level that optimizes for size (s, z: at 3, which
# trades size for speed, that figure is reported against the same 1 KiB); or if either binary
# links a 64-bit division routine (the 32-bit word's paths divide with the core's 32-bit
# division only).
set -euo pipefail
cd "$(dirname "$0")/../examples/firmware"

target=thumbv7em-none-eabihf
limit=1024
levels=("$@")
if [ ${#levels[@]} -eq 0 ]; then
  levels=(s z 3)
fi

# llvm-size and llvm-nm from rustup's llvm-tools, or from the system's LLVM.
bin_dir="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin"
if [ ! -x "$bin_dir/llvm-size" ] && command -v rustup >/dev/null; then
  rustup component add llvm-tools >/dev/null 2>&1 || true
fi
if [ -x "$bin_dir/llvm-size" ]; then
  llvm_size="$bin_dir/llvm-size"
  llvm_nm="$bin_dir/llvm-nm"
else
  llvm_size=$(command -v llvm-size)
  llvm_nm=$(command -v llvm-nm)
fi

# Prints ".text .rodata .data .bss" of an ELF file, in bytes.
sections() {
  "$llvm_size" -A "$1" | awk '
    $1 == ".text" { t = $2 } $1 == ".rodata" { r = $2 } $1 == ".data" { d = $2 } $1 == ".bss" { b = $2 }
    END { print t + 0, r + 0, d + 0, b + 0 }'
}

bins=(size-baseline size-bucket size-bucket-retry)
failed=0
for level in "${levels[@]}"; do
  target_dir="target/size-opt-$level"
  CARGO_PROFILE_RELEASE_OPT_LEVEL="$level" cargo build --quiet --release --target "$target" \
    --target-dir "$target_dir" $(printf -- "--bin %s " "${bins[@]}")
  out="$target_dir/$target/release"
  read -r bt br bd bb < <(sections "$out/size-baseline")
  echo
  echo "== $target, opt-level $level, LTO, codegen-units 1 (bytes)"
  printf "%-34s %7s %7s %7s %7s\n" binary .text .rodata .data .bss
  printf "%-34s %7d %7d %7d %7d\n" size-baseline "$bt" "$br" "$bd" "$bb"
  for bin in size-bucket size-bucket-retry; do
    read -r t r d b < <(sections "$out/$bin")
    printf "%-34s %7d %7d %7d %7d\n" "$bin" "$t" "$r" "$d" "$b"
  done
  for bin in size-bucket size-bucket-retry; do
    read -r t r d b < <(sections "$out/$bin")
    delta=$((t - bt))
    note=""
    if [ "$bin" = size-bucket ]; then
      label="delta: try_acquire"
      if [ "$delta" -le "$limit" ]; then note="<= $limit: ok"; else note="> $limit: TOO BIG"; failed=1; fi
    else
      label="delta: try_acquire + retry_after"
      if [ "$delta" -le "$limit" ]; then
        note="<= $limit: ok"
      elif [ "$level" = s ] || [ "$level" = z ]; then
        note="> $limit: TOO BIG"; failed=1
      else
        note="> $limit: over the target (held to it at s and z only)"
      fi
    fi
    printf "%-34s %7d %7d %7d %7d  %s\n" "$label" "$delta" $((r - br)) $((d - bd)) $((b - bb)) "$note"
  done
  for bin in size-bucket size-bucket-retry; do
    divisions=$("$llvm_nm" --defined-only "$out/$bin" \
      | awk '$3 ~ /^(__aeabi_uldivmod|__aeabi_ldivmod|__udivdi3|__divdi3|__umoddi3|__moddi3|__udivmoddi4)$/ { print $3 }' \
      | sort -u | tr '\n' ' ')
    if [ -n "$divisions" ]; then
      echo "$bin links 64-bit division: $divisions(FAIL)"
      failed=1
    else
      echo "$bin links no 64-bit division routine: ok"
    fi
  done
  # The bucket is one static; its symbol's size is size_of::<TokenBucket<_>>().
  ram_hex=$("$llvm_nm" -S --defined-only "$out/size-bucket" | awk '$4 ~ /GATE/ { print $2 }')
  ram=$((16#$ram_hex))
  echo "RAM per bucket: $ram bytes (size_of::<TokenBucket<_>>() with the 32-bit word; in .data,"
  echo "since the word is mutable, with its initial value in flash)"
done
exit $failed
