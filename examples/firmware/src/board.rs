//! The emulated board this build runs on, chosen from the target by `build.rs`.
//!
//! `CORE_HZ` is the processor clock that qemu 7.2 models for the board, which SysTick counts
//! when its CLKSOURCE bit selects the processor clock (what [`systick::start`] does). The
//! firmware measures it at start-up against the instruction counter (see `ICOUNT_SHIFT`) and
//! fails if it differs.
//!
//! [`systick::start`]: crate::systick::start

/// The board and its core.
#[cfg(board = "lm3s6965evb")]
pub const NAME: &str = "lm3s6965evb (Cortex-M3, thumbv7m-none-eabi)";
/// The processor clock: qemu derives it from the RCC register's reset value (200 MHz PLL / 16).
#[cfg(board = "lm3s6965evb")]
pub const CORE_HZ: u64 = 12_500_000;
/// The `-icount shift` of this board's runner in `.cargo/config.toml`: one instruction advances
/// virtual time by 2^shift ns (64 ns, near the core's 80 ns cycle).
#[cfg(board = "lm3s6965evb")]
pub const ICOUNT_SHIFT: u32 = 6;

/// The board and its core.
#[cfg(board = "microbit")]
pub const NAME: &str = "microbit (nRF51822, Cortex-M0, thumbv6m-none-eabi)";
/// The processor clock: the nRF51's 16 MHz.
#[cfg(board = "microbit")]
pub const CORE_HZ: u64 = 16_000_000;
/// The `-icount shift` of this board's runner in `.cargo/config.toml`: one instruction advances
/// virtual time by 2^shift ns (64 ns, near the core's 62.5 ns cycle).
#[cfg(board = "microbit")]
pub const ICOUNT_SHIFT: u32 = 6;

/// The board and its core.
#[cfg(board = "mps2-an386")]
pub const NAME: &str = "mps2-an386 (Cortex-M4F, thumbv7em-none-eabihf)";
/// The processor clock: the MPS2 FPGA's 25 MHz SYSCLK.
#[cfg(board = "mps2-an386")]
pub const CORE_HZ: u64 = 25_000_000;
/// The `-icount shift` of this board's runner in `.cargo/config.toml`: one instruction advances
/// virtual time by 2^shift ns (32 ns, near the core's 40 ns cycle).
#[cfg(board = "mps2-an386")]
pub const ICOUNT_SHIFT: u32 = 5;
