//! What the firmware needs besides tollgate: the emulated board's constants, and a [`Clock`] and
//! a `DelayNs` on the SysTick timer.
//!
//! [`Clock`]: tollgate::Clock

#![no_std]

pub mod board;
pub mod cost;
#[cfg(feature = "embassy")]
pub mod embassy_driver;
pub mod size;
pub mod systick;
