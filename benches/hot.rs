//! Micro-benchmarks of the per-request hot path: decoding a lock request, finding its command,
//! recognising a script, the majority rule, and encoding the reply.

use std::hint::black_box;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, criterion_group, criterion_main};
use redlock_proxy::quorum::{Ballots, validity};
use redlock_proxy::wire::request::{self, Limits};
use redlock_proxy::wire::{master::command, reply::Reply};

const UNLOCK: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end"#;

fn hot(c: &mut Criterion) {
    let set = command(&[
        b"SET",
        b"lock:12345678",
        b"0123456789abcdef0123",
        b"NX",
        b"PX",
        b"30000",
    ]);
    let limits = Limits::default();
    // One decoder per connection, as the client uses it.
    let mut decoder = request::Decoder::new(limits);
    c.bench_function("decode SET NX PX (multibulk)", |b| {
        b.iter(|| {
            let mut buf = BytesMut::from(&set[..]);
            black_box(decoder.decode(&mut buf, true).unwrap().map(|a| a.len()))
        })
    });
    c.bench_function("decode SET NX PX (inline)", |b| {
        b.iter(|| {
            let mut buf =
                BytesMut::from(&b"SET lock:12345678 0123456789abcdef0123 NX PX 30000\r\n"[..]);
            black_box(decoder.decode(&mut buf, true).unwrap().map(|a| a.len()))
        })
    });
    // A 2000-argument request arriving 64 bytes per read: the incremental decoder against
    // parsing the partial request again from its start on every read (what a fresh decoder does).
    let mut many = b"*2000\r\n".to_vec();
    for _ in 0..2000 {
        many.extend_from_slice(b"$8\r\nlock:123\r\n");
    }
    let trickle = |incremental: bool| {
        let mut d = request::Decoder::new(limits);
        let mut buf = BytesMut::new();
        let mut got = 0;
        for chunk in many.chunks(64) {
            buf.extend_from_slice(chunk);
            if !incremental {
                d = request::Decoder::new(limits);
            }
            if let Some(args) = d.decode(&mut buf, true).unwrap() {
                got += args.len();
            }
        }
        got
    };
    c.bench_function("decode 2000 args, 64 B per read (incremental)", |b| {
        b.iter(|| black_box(trickle(true)))
    });
    c.bench_function("decode 2000 args, 64 B per read (re-parse)", |b| {
        b.iter(|| black_box(trickle(false)))
    });
    c.bench_function("command lookup", |b| {
        b.iter(|| black_box(redlock_proxy::command::lookup(black_box(b"SeT"))))
    });
    c.bench_function("recognise unlock script", |b| {
        b.iter(|| {
            black_box(redlock_proxy::scripts::recognise(black_box(
                UNLOCK.as_bytes(),
            )))
        })
    });
    let extend = include_bytes!("../tests/clients/lua/redispy_extend.lua");
    c.bench_function("recognise redis-py extend script", |b| {
        b.iter(|| black_box(redlock_proxy::scripts::recognise(black_box(extend))))
    });
    let acquire = include_bytes!("../tests/clients/lua/redlock5_ACQUIRE_SCRIPT.lua");
    c.bench_function("recognise node-redlock multi-key acquire script", |b| {
        b.iter(|| black_box(redlock_proxy::scripts::recognise(black_box(acquire))))
    });
    // Issue 10 row 6: the largest script analysed, all `if(`.
    let hostile = b"if(".repeat(64 * 1024 / 3);
    c.bench_function("recognise 64 KiB of if(", |b| {
        b.iter(|| black_box(redlock_proxy::scripts::recognise(black_box(&hostile))))
    });
    let ballots = Ballots {
        replies: vec![
            Some(Reply::ok()),
            Some(Reply::Nil),
            Some(Reply::ok()),
            None,
            Some(Reply::ok()),
        ],
        failed: vec![None; 5].into(),
        quorum: redlock_proxy::quorum::Quorum::of(5),
        masters: None,
    };
    c.bench_function("majority of 5", |b| {
        b.iter(|| black_box(black_box(&ballots).majority().cloned()))
    });
    c.bench_function("validity", |b| {
        b.iter(|| {
            validity(
                black_box(Duration::from_millis(30_000)),
                black_box(Duration::from_micros(250)),
                0.01,
            )
        })
    });
    c.bench_function("encode SET NX PX for a master", |b| {
        let key = Bytes::from_static(b"lock:12345678");
        b.iter(|| {
            black_box(command(&[
                b"SET",
                &key,
                b"0123456789abcdef0123",
                b"NX",
                b"PX",
                b"30000",
            ]))
        })
    });
    c.bench_function("encode +OK and nil replies", |b| {
        let mut out = BytesMut::with_capacity(64);
        b.iter(|| {
            out.clear();
            Reply::ok().encode(&mut out, false);
            Reply::Nil.encode(&mut out, true);
            black_box(out.len())
        })
    });
}

criterion_group!(benches, hot);
criterion_main!(benches);
