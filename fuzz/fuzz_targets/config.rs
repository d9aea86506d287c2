//! Configuration parsing and validation on any text: an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(config) = redlock_proxy::config::Config::from_toml(text)
    {
        let _ = config.validate();
    }
});
