#!/usr/bin/env bash
# Every crate's docs as docs.rs builds them (nightly, `--cfg docsrs`, every feature, `--no-deps`,
# one crate at a time, so no sibling's docs sit beside them to link to), with warnings denied
# (`rustdoc::broken_intra_doc_links` named among them), then the built pages searched for a link
# left as literal text. Rustdoc does not warn of every such link: one that resolves to another
# crate's item whose docs it cannot locate (a dependency with no `html_root_url`, not documented
# beside it) is written out as its bracketed source, "[`KeyedLimiter`]", without a warning.
#
#   scripts/check-doc-links.sh                 # the three crates
#   scripts/check-doc-links.sh tollgate-tower  # one
#
# A bracketed code span counts as ours when our own sources write that link; the rest are the
# docs of foreign traits that our types implement (tower's `MakeService`, redis's `Commands`),
# shown on our pages, which are not ours to fix. Each crate's `html_root_url` must name its
# version: it is where the siblings' links point on a build like this one, and each page they
# point to (docs.rs/<crate>/<version>/…) must be one that crate's docs, built here, hold.
# Fails on any finding, listing them.
set -euo pipefail
cd "$(dirname "$0")/.."
crates=("$@")
if [ ${#crates[@]} -eq 0 ]; then
  crates=(tollgate tollgate-tower tollgate-redis)
fi
target=target/docsrs
status=0
rm -rf "$target/alone"
mkdir -p "$target/alone"

for crate in "${crates[@]}"; do
  manifest=Cargo.toml
  [ "$crate" = tollgate ] || manifest="$crate/Cargo.toml"
  lib="$(dirname "$manifest")/src/lib.rs"
  version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$manifest" | head -n 1)
  root="https://docs.rs/$crate/$version"
  if ! grep -qF "#![doc(html_root_url = \"$root\")]" "$lib"; then
    echo "$lib: no #![doc(html_root_url = \"$root\")] (the crate's version is $version)"
    status=1
  fi

  # The previous crate's pages would resolve this one's links to it: start with none.
  rm -rf "$target/doc"
  RUSTDOCFLAGS="--cfg docsrs -D warnings -D rustdoc::broken_intra_doc_links" \
    cargo +nightly doc --no-deps -p "$crate" --all-features --target-dir "$target"

  pages="$target/doc/${crate//-/_}"
  found=$({ grep -rhoE '\[<code>[^<]*</code>\]' "$pages" || true; } | sort -u |
    sed -e 's/^\[<code>//' -e 's/<\/code>\]$//' -e 's/&lt;/</g' -e 's/&gt;/>/g' -e 's/&amp;/\&/g')
  while IFS= read -r text; do
    [ -n "$text" ] || continue
    if git grep -qF "[\`$text\`]" -- '*.rs' '*.md'; then
      echo "$crate: [\`$text\`] is printed as text, not a link, on:"
      grep -rlF "[<code>$(sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' <<< "$text")</code>]" "$pages" |
        sed "s|^$target/doc/|  |"
      status=1
    fi
  done <<< "$found"
  mv "$target/doc" "$target/alone/$crate"
done

# The pages the siblings' links name, in the docs of the crate they name.
for crate in "${crates[@]}"; do
  links=$({ grep -rhoE 'href="https://docs\.rs/tollgate(-tower|-redis)?/[^/"]+/[^"#]*' \
    "$target/alone/$crate" || true; } | sed 's/^href="https:\/\/docs\.rs\///' | sort -u)
  while IFS=/ read -r linked version page; do
    [ -n "$linked" ] && [ -d "$target/alone/$linked" ] || continue
    if [ ! -e "$target/alone/$linked/$page" ]; then
      echo "$crate: links docs.rs/$linked/$version/$page, which $linked's docs do not have"
      status=1
    fi
  done <<< "$links"
done

if [ $status -ne 0 ]; then
  echo "unresolved doc links (above)"
else
  echo "doc links: every link of ${crates[*]} resolves"
fi
exit $status
