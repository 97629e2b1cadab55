//! Fuzz target: see `checks::admin_query`.
#![no_main]

#[allow(dead_code)] // each target uses one of the checks
#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::admin_query(data));
