//! Script recognition on any bytes: never a panic, and fast (libFuzzer's timeout catches a
//! quadratic path).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = redlock_proxy::scripts::recognise(data);
});
