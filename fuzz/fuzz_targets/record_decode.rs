#![no_main]

#[path = "../../crates/core/tests/it/fuzz/checks.rs"]
#[allow(dead_code)] // each target calls one of the checks
mod checks;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| checks::record_decode(data));
