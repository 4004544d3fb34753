//! The cost harness with six call sites of each bucket's check: the measured one and five others (see
//! `tollgate_firmware::cost` and `cost.sh`).

#![no_std]
#![no_main]

/// Whether each bucket's check has call sites besides the measured one.
const MANY: bool = true;

include!("../cost_main.rs");
