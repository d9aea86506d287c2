//! Redis Cluster's key space: 16,384 hash slots, a key's slot (CRC16 of the key, or of its
//! `{hash tag}`), and the slot map a cluster node reports with `CLUSTER SLOTS`.

use crate::wire::reply::Reply;

/// Number of hash slots in a Redis Cluster.
pub const SLOTS: usize = 16_384;

/// The most primaries a slot map may name: Redis Cluster's documented ceiling of 1,000 nodes,
/// rounded up (each one is a connection the member keeps).
pub(super) const MAX_PRIMARIES: usize = 1_024;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0, no reflection), the checksum the
/// Redis Cluster specification names for key slots.
pub fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot of `key`: when the key holds a `{` followed later by a `}` with at least one byte
/// between them, only the bytes between the first `{` and the first `}` after it are hashed.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(0) | None => key,
            Some(len) => &key[open + 1..open + 1 + len],
        },
        None => key,
    };
    crc16(hashed) & (SLOTS as u16 - 1)
}

/// One slot range of a `CLUSTER SLOTS` reply: its primary and replicas as `host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    /// First slot.
    pub start: u16,
    /// Last slot (inclusive).
    pub end: u16,
    /// The primary's `host:port`.
    pub primary: String,
    /// The replicas' `host:port`.
    pub replicas: Vec<String>,
}

/// Reads a `CLUSTER SLOTS` reply; `seed_host` stands in for a node that reports an empty
/// address (a node names itself so when it does not know its own IP).
pub fn parse_cluster_slots(reply: &Reply, seed_host: &str) -> Result<Vec<Range>, String> {
    let Reply::Array(ranges) = reply else {
        return Err(match reply {
            // At most 200 bytes of it: a hostile node's error may be megabytes long.
            Reply::Error(e) => String::from_utf8_lossy(&e[..e.len().min(200)]).into_owned(),
            _ => "CLUSTER SLOTS: unexpected reply".into(),
        });
    };
    let mut out = Vec::with_capacity(ranges.len().min(SLOTS));
    // Each slot has one owner: a slot in two ranges is a broken (or hostile) map, and refusing
    // it bounds the work of reading and installing a map to the slot count.
    let mut taken = vec![false; SLOTS];
    let mut primaries: std::collections::HashSet<String> = std::collections::HashSet::new();
    for r in ranges {
        let Reply::Array(parts) = r else {
            return Err("CLUSTER SLOTS: a range is not an array".into());
        };
        let slot = |i: usize| match parts.get(i) {
            Some(Reply::Integer(n)) if (0..SLOTS as i64).contains(n) => Ok(*n as u16),
            _ => Err("CLUSTER SLOTS: bad slot number".to_string()),
        };
        let (start, end) = (slot(0)?, slot(1)?);
        let mut nodes = parts.iter().skip(2).map(|n| node_addr(n, seed_host));
        let primary = nodes
            .next()
            .ok_or("CLUSTER SLOTS: a range without a primary")??;
        let replicas = nodes.collect::<Result<Vec<_>, _>>()?;
        let (start, end) = (start.min(end), end.max(start));
        if let Some(s) =
            (start..=end).find(|s| std::mem::replace(&mut taken[usize::from(*s)], true))
        {
            return Err(format!("CLUSTER SLOTS: slot {s} is in two ranges"));
        }
        if !primaries.contains(&primary) {
            if primaries.len() == MAX_PRIMARIES {
                return Err(format!(
                    "CLUSTER SLOTS: more than {MAX_PRIMARIES} primaries (Redis Cluster's limit)"
                ));
            }
            primaries.insert(primary.clone());
        }
        out.push(Range {
            start,
            end,
            primary,
            replicas,
        });
    }
    Ok(out)
}

fn node_addr(node: &Reply, seed_host: &str) -> Result<String, String> {
    let Reply::Array(f) = node else {
        return Err("CLUSTER SLOTS: a node is not an array".into());
    };
    let host = match f.first() {
        Some(Reply::Bulk(h)) if !h.is_empty() && h.as_ref() != b"?" => {
            String::from_utf8_lossy(h).into_owned()
        }
        _ => seed_host.to_string(),
    };
    let port = match f.get(1) {
        Some(Reply::Integer(p)) if (1..=65535).contains(p) => *p,
        _ => return Err("CLUSTER SLOTS: bad port".into()),
    };
    Ok(if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    })
}

/// Slot ranges as `INFO` writes them: `0-5460,5462`.
pub fn ranges_text(ranges: &[(u16, u16)]) -> String {
    let mut out = String::new();
    for (i, (a, b)) in ranges.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        if a == b {
            out.push_str(&a.to_string());
        } else {
            out.push_str(&format!("{a}-{b}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn crc16_matches_the_cluster_specification() {
        // The test vector of the Redis Cluster specification.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn slots_follow_the_hash_tag_rules() {
        // Values as `CLUSTER KEYSLOT` answers them.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"123456789"), 0x31C3 & 0x3FFF);
        // Only the tag is hashed.
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"{user1000}.followers"), key_slot(b"user1000"));
        // An empty tag hashes the whole key; the first `}` after the first `{` ends the tag.
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") & 0x3FFF);
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        // No closing brace: the whole key.
        assert_eq!(key_slot(b"foo{bar"), crc16(b"foo{bar") & 0x3FFF);
        // python-redis-lock's lock and its signal list live in different slots.
        assert_ne!(key_slot(b"lock:x"), key_slot(b"lock-signal:x"));
    }

    fn node(host: &str, port: i64) -> Reply {
        Reply::Array(vec![
            Reply::Bulk(Bytes::from(host.to_string())),
            Reply::Integer(port),
            Reply::Bulk(Bytes::from_static(b"id")),
        ])
    }

    #[test]
    fn cluster_slots_replies_are_read() {
        let reply = Reply::Array(vec![
            Reply::Array(vec![
                Reply::Integer(0),
                Reply::Integer(5460),
                node("127.0.0.1", 7000),
                node("127.0.0.1", 7003),
            ]),
            Reply::Array(vec![
                Reply::Integer(5461),
                Reply::Integer(16383),
                node("", 7001),
            ]),
        ]);
        let r = parse_cluster_slots(&reply, "10.0.0.1").unwrap();
        assert_eq!(r[0].primary, "127.0.0.1:7000");
        assert_eq!(r[0].replicas, vec!["127.0.0.1:7003".to_string()]);
        assert_eq!((r[1].start, r[1].end), (5461, 16383));
        assert_eq!(r[1].primary, "10.0.0.1:7001");
        assert!(
            parse_cluster_slots(
                &Reply::error("ERR This instance has cluster support disabled"),
                "h"
            )
            .is_err()
        );
        assert!(parse_cluster_slots(&Reply::Array(vec![Reply::Integer(1)]), "h").is_err());
        assert_eq!(ranges_text(&[(0, 5460), (7, 7)]), "0-5460 7");
    }

    /// Hostile `CLUSTER SLOTS` replies, as bytes on the wire: each is decoded without a panic
    /// or a large allocation, and none becomes a slot map.
    #[test]
    fn garbage_from_a_cluster_node_is_no_slot_map() {
        use crate::wire::master::ReplyDecoder;
        use bytes::BytesMut;
        let node = |slots: &str, port: &str| {
            format!("*1\r\n*3\r\n{slots}*2\r\n$9\r\n127.0.0.1\r\n{port}\r\n").into_bytes()
        };
        let mut deep = b"*1\r\n".repeat(10_000);
        deep.extend_from_slice(b":1\r\n");
        let long_error = [b"-".as_slice(), &[b'E'; 100_000], b"\r\n"].concat();
        for wire in [
            b"*4294967295\r\n".to_vec(),
            b"*9223372036854775807\r\n:1\r\n".to_vec(),
            node(":-1\r\n:5\r\n", ":7000"),
            node(":0\r\n:16384\r\n", ":7000"),
            node(":9223372036854775807\r\n:0\r\n", ":7000"),
            node(":-9223372036854775808\r\n:0\r\n", ":7000"),
            node(":0\r\n:16383\r\n", ":0"),
            node(":0\r\n:16383\r\n", ":-7000"),
            node(":0\r\n:16383\r\n", ":65536"),
            node(":0\r\n:16383\r\n", "$4\r\n7000"),
            node("$1\r\n0\r\n:16383\r\n", ":7000"),
            b"*1\r\n*3\r\n:0\r\n:16383\r\n:5\r\n".to_vec(),
            b"*1\r\n*2\r\n:0\r\n:16383\r\n".to_vec(),
            b"*1\r\n:5\r\n".to_vec(),
            b"*1\r\n*0\r\n".to_vec(),
            b"$99999999999\r\n".to_vec(),
            b"-MOVED 1 not-an-address\r\n".to_vec(),
            b"\x00\xff\xfe garbage\r\n".to_vec(),
            long_error,
            deep,
            // Two ranges sharing a slot.
            b"*2\r\n*3\r\n:0\r\n:10\r\n*2\r\n$1\r\na\r\n:1\r\n*3\r\n:10\r\n:20\r\n*2\r\n$1\r\nb\r\n:1\r\n"
                .to_vec(),
        ] {
            let mut buf = BytesMut::from(&wire[..]);
            if let Ok(Some(reply)) = ReplyDecoder::default().decode(&mut buf) {
                let e = parse_cluster_slots(&reply, "seed").expect_err(&format!("{reply:?}"));
                assert!(!e.is_empty() && e.len() < 300, "{e}");
            }
        }
    }

    /// A map as large as a hostile node can make it: the whole slot space in every one of a
    /// hundred thousand ranges (work without a bound: 1.6 billion slot writes when installed)
    /// and one primary for each slot. Both are refused after reading at most the slot count.
    #[test]
    fn a_map_whose_size_only_a_hostile_node_makes_is_refused() {
        let range = |start: i64, end: i64, host: String| {
            Reply::Array(vec![
                Reply::Integer(start),
                Reply::Integer(end),
                Reply::Array(vec![Reply::Bulk(Bytes::from(host)), Reply::Integer(7000)]),
            ])
        };
        let whole = Reply::Array((0..100_000).map(|_| range(0, 16_383, "h".into())).collect());
        let e = parse_cluster_slots(&whole, "seed").unwrap_err();
        assert!(e.contains("slot 0 is in two ranges"), "{e}");
        let each = Reply::Array((0..16_384).map(|s| range(s, s, format!("h{s}"))).collect());
        let e = parse_cluster_slots(&each, "seed").unwrap_err();
        assert!(e.contains("more than 1024 primaries"), "{e}");
        // A real-sized map: 1,000 primaries, one slot range each (and the rest on one).
        let mut ranges: Vec<Reply> = (0..1_000).map(|s| range(s, s, format!("h{s}"))).collect();
        ranges.push(range(1_000, 16_383, "h0".into()));
        assert_eq!(
            parse_cluster_slots(&Reply::Array(ranges), "seed").map(|r| r.len()),
            Ok(1_001)
        );
    }
}
