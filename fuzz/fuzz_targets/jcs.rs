#![no_main]

#[path = "../../crates/core/tests/fuzz/checks.rs"]
mod checks;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| checks::jcs(data));
