#![no_main]

#[path = "../../tests/it/fuzz/config.rs"]
mod check;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| check::config(data));
