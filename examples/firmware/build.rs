//! Picks the machine from the target, since each target here runs on exactly one emulated board:
//! copies that board's memory map to `memory.x` for cortex-m-rt's `link.x`, links with `link.x`,
//! and sets `board`. The linker script is passed here rather than in `rustflags`, which a
//! `RUSTFLAGS` variable in the environment (even an empty one) would replace.

use std::{env, fs, path::PathBuf};

const BOARDS: [(&str, &str); 3] = [
    ("thumbv7m-none-eabi", "lm3s6965evb"),
    ("thumbv6m-none-eabi", "microbit"),
    ("thumbv7em-none-eabihf", "mps2-an386"),
];

fn main() {
    let target = env::var("TARGET").expect("cargo sets TARGET for build scripts");
    let names: Vec<String> = BOARDS.iter().map(|(_, b)| format!("\"{b}\"")).collect();
    println!(
        "cargo::rustc-check-cfg=cfg(board, values({}))",
        names.join(", ")
    );
    println!("cargo::rerun-if-changed=build.rs");
    let Some((_, board)) = BOARDS.iter().find(|(t, _)| *t == target) else {
        panic!(
            "no emulated board for target {target}: build with --target {}",
            BOARDS.map(|(t, _)| t).join(", --target ")
        );
    };
    let memory = format!("memory/{board}.x");
    println!("cargo::rerun-if-changed={memory}");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    fs::copy(&memory, out.join("memory.x")).expect("copy the board's memory map");
    println!("cargo::rustc-link-search={}", out.display());
    println!("cargo::rustc-link-arg-bins=-Tlink.x");
    println!("cargo::rustc-cfg=board=\"{board}\"");
}
