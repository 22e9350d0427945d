#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gangway::fuzzing::journal(data));
