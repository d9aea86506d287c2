//! The client request decoder, fed in pieces: never a panic, nothing consumed while a request
//! is incomplete, the same requests whatever the piece sizes, and every request re-encoded
//! decodes to the same arguments.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use redlock_proxy::wire::master::command;
use redlock_proxy::wire::request::{Decoder, Limits};

fn limits() -> Limits {
    Limits {
        max_bulk_len: 1 << 16,
        max_request_len: 1 << 20,
        ..Limits::default()
    }
}

/// Decodes `input` arriving `step` bytes at a time; the requests, and whether it ended in error.
fn run(input: &[u8], step: usize, authed: bool) -> (Vec<Vec<bytes::Bytes>>, bool) {
    let mut d = Decoder::new(limits());
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in input.chunks(step.max(1)) {
        buf.extend_from_slice(chunk);
        loop {
            let before = buf.len();
            match d.decode(&mut buf, authed) {
                Ok(Some(args)) => out.push(args.into_vec()),
                Ok(None) => {
                    assert!(buf.len() <= before);
                    break;
                }
                Err(_) => return (out, true),
            }
        }
    }
    (out, false)
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, input)) = data.split_first() else {
        return;
    };
    let authed = first & 1 == 0;
    let (whole, failed) = run(input, input.len(), authed);
    let (pieces, failed_in_pieces) = run(input, usize::from(first >> 1) + 1, authed);
    if !failed && !failed_in_pieces {
        assert_eq!(whole, pieces, "piece size changed the requests");
    }
    for args in whole {
        let parts: Vec<&[u8]> = args.iter().map(|a| a.as_ref()).collect();
        let mut again = BytesMut::from(&command(&parts)[..]);
        let mut d = Decoder::new(Limits::default());
        let decoded = d.decode(&mut again, true).ok().flatten().map(|a| a.into_vec());
        assert_eq!(decoded, Some(args));
    }
});
