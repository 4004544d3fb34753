//! The cost harness with one call site of each bucket's check: the measured one (see
//! `tollgate_firmware::cost` and `cost.sh`).

#![no_std]
#![no_main]

/// Whether each bucket's check has call sites besides the measured one.
const MANY: bool = false;

include!("../cost_main.rs");
