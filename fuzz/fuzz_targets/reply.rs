//! The master reply decoder: never a panic or a stack overflow, however deep or broken the
//! input; what it builds encodes in RESP2 and RESP3 and drops without recursion trouble.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use redlock_proxy::wire::master::ReplyDecoder;

fuzz_target!(|data: &[u8]| {
    let mut d = ReplyDecoder::default();
    let mut buf = BytesMut::new();
    for chunk in data.chunks(7) {
        buf.extend_from_slice(chunk);
        while let Ok(Some(reply)) = d.decode(&mut buf) {
            let mut out = BytesMut::new();
            reply.encode(&mut out, false);
            reply.encode(&mut out, true);
        }
    }
});
