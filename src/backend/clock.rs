//! Clock watch: is a master's wall clock still moving with the proxy's monotonic clock?
//!
//! Redis expires keys by its wall clock. A master whose clock jumps forward drops locks early,
//! and another client can then take them there: one master's jump can turn into a second
//! grant. So the driver reads the master's `TIME` (on every health probe, and in the same round
//! trip as every acquisition's `SET`) and compares how far it moved with how far the proxy's
//! monotonic clock moved.
//!
//! Each reading is a [`Sample`]: when the request was written (`sent`), when the reply was read
//! (`recv`), and the master's time. The master read its clock somewhere between the two, so
//! between two samples `a` and `b` the real time that passed lies in
//! `[b.sent − a.recv, b.recv − a.sent]`, whatever the network did. A master clock that moved
//! outside that interval, widened by the allowed rate error and a small fixed tolerance, has
//! jumped. The check has no false alarms from latency: a slow reply widens the interval, it
//! never moves it.
//!
//! Every sample is checked against the previous one and against anchors kept over the last
//! window (`span`). Checking against anchors of several ages catches both a sudden step and a
//! clock that keeps running fast in steps each too small to notice from one sample to the next.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use tracing::warn;

use super::health::MasterInfo;
use crate::error::Kind;
use crate::wire::reply::Reply;

/// One reading of a master's clock.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// When the request holding `TIME` was written.
    pub sent: Instant,
    /// When the `TIME` reply was read.
    pub recv: Instant,
    /// The master's clock, in microseconds since the Unix epoch.
    pub master_us: i64,
}

/// How much disagreement the watch forgives.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// Largest rate error: the master may gain or lose this fraction of the elapsed time.
    pub rate: f64,
    /// Fixed slack on top of the rate error.
    pub tolerance: Duration,
    /// How far back anchors are kept.
    pub span: Duration,
}

/// A reading that the earlier ones cannot explain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Jump {
    /// How far the master's clock moved beyond what was allowed, in ms; negative for a clock
    /// that fell behind (or went backwards).
    pub by_ms: i64,
    /// Proxy time between the two readings compared, in ms.
    pub over_ms: u64,
}

/// Readings of one master's clock, kept across reconnects (the host's clock does not care
/// whether our connection dropped).
#[derive(Debug)]
pub struct ClockWatch {
    rules: Rules,
    last: Option<Sample>,
    anchors: VecDeque<Sample>,
}

/// Most anchors kept; they are spaced `span / ANCHORS` apart.
const ANCHORS: u32 = 16;

impl ClockWatch {
    /// A watch with no readings yet.
    pub fn new(rules: Rules) -> ClockWatch {
        ClockWatch {
            rules,
            last: None,
            anchors: VecDeque::new(),
        }
    }

    /// Checks `s` against earlier readings and records it. After a jump the readings start
    /// over from `s`, so one step is reported once and the clock is then judged by how it
    /// behaves from its new position.
    pub fn observe(&mut self, s: Sample) -> Result<(), Jump> {
        let verdict = self
            .last
            .iter()
            .chain(self.anchors.iter())
            .map(|r| self.compare(r, &s))
            .find_map(Result::err);
        if verdict.is_some() {
            self.anchors.clear();
        }
        self.record(s);
        match verdict {
            Some(j) => Err(j),
            None => Ok(()),
        }
    }

    fn record(&mut self, s: Sample) {
        self.last = Some(s);
        let every = (self.rules.span / ANCHORS).max(Duration::from_millis(20));
        if self
            .anchors
            .back()
            .is_none_or(|a| s.recv.saturating_duration_since(a.recv) >= every)
        {
            self.anchors.push_back(s);
        }
        while self.anchors.len() > 1
            && self
                .anchors
                .front()
                .is_some_and(|a| s.recv.saturating_duration_since(a.recv) > self.rules.span)
        {
            self.anchors.pop_front();
        }
    }

    fn compare(&self, a: &Sample, b: &Sample) -> Result<(), Jump> {
        let lo = b.sent.saturating_duration_since(a.recv);
        let hi = b.recv.saturating_duration_since(a.sent);
        let moved = b.master_us - a.master_us;
        let tol = self.rules.tolerance.as_micros() as i64;
        let max = (hi.as_micros() as f64 * (1.0 + self.rules.rate)) as i64 + tol;
        let min = (lo.as_micros() as f64 * (1.0 - self.rules.rate)) as i64 - tol;
        let over_ms = hi.as_millis() as u64;
        if moved > max {
            Err(Jump {
                by_ms: (moved - hi.as_micros() as i64) / 1000,
                over_ms,
            })
        } else if moved < min {
            Err(Jump {
                by_ms: (moved - lo.as_micros() as i64) / 1000,
                over_ms,
            })
        } else {
            Ok(())
        }
    }
}

/// Reads a `TIME` reply (`[seconds, microseconds]`) as microseconds since the epoch.
pub fn parse_time(reply: &Reply) -> Option<i64> {
    let Reply::Array(parts) = reply else {
        return None;
    };
    let field = |i: usize| match parts.get(i) {
        Some(Reply::Bulk(b)) => crate::wire::resp::parse_int(b),
        _ => None,
    };
    field(0)?.checked_mul(1_000_000)?.checked_add(field(1)?)
}

/// Checks one `TIME` reading; on a jump (or no reading) the master's clock is distrusted.
/// Returns true when the reading is consistent.
pub(super) fn judge(
    info: &MasterInfo,
    watch: &mut ClockWatch,
    distrust_for: Duration,
    reading: Result<Sample, Reply>,
) -> bool {
    match reading {
        Ok(sample) => match watch.observe(sample) {
            Ok(()) => true,
            Err(jump) => {
                info.distrust_clock(distrust_for);
                warn!(
                    jump_ms = jump.by_ms,
                    over_ms = jump.over_ms,
                    distrust_ms = distrust_for.as_millis() as u64,
                    status = "clock-suspect",
                    "master clock jumped: its votes do not count until it has been steady for the window"
                );
                false
            }
        },
        Err(reply) => {
            info.distrust_clock(distrust_for);
            warn!(
                kind = reply.error_kind().map(Kind::word),
                reply = ?reply,
                status = "clock-suspect",
                "master did not answer TIME, so its clock cannot be watched (set clock_watch = false if TIME is disabled)"
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn rules() -> Rules {
        Rules {
            rate: 0.01,
            tolerance: Duration::from_millis(5),
            span: Duration::from_secs(10),
        }
    }

    /// A sample read at proxy offset `at_ms` (with 1 ms round trip) showing `master_ms`.
    fn at(base: Instant, at_ms: u64, master_ms: i64) -> Sample {
        Sample {
            sent: base + Duration::from_millis(at_ms),
            recv: base + Duration::from_millis(at_ms + 1),
            master_us: 1_700_000_000_000_000 + master_ms * 1000,
        }
    }

    #[test]
    fn a_steady_clock_passes() {
        let base = Instant::now();
        let mut w = ClockWatch::new(rules());
        for i in 0..2000 {
            // 0.5 % fast and a constant offset: within the rate allowance.
            let t = i * 10;
            assert_eq!(
                w.observe(at(base, t, 5_000 + (t as f64 * 1.005) as i64)),
                Ok(())
            );
        }
    }

    #[test]
    fn latency_never_looks_like_a_jump() {
        let base = Instant::now();
        let mut w = ClockWatch::new(rules());
        w.observe(at(base, 0, 0)).unwrap();
        // The master answered at once, but the reply reached us 400 ms late.
        let slow = Sample {
            sent: base + Duration::from_millis(100),
            recv: base + Duration::from_millis(500),
            master_us: 1_700_000_000_000_000 + 100_000,
        };
        assert_eq!(w.observe(slow), Ok(()));
        assert_eq!(w.observe(at(base, 600, 600)), Ok(()));
    }

    #[test]
    fn a_forward_step_is_caught_at_the_next_reading() {
        let base = Instant::now();
        let mut w = ClockWatch::new(rules());
        w.observe(at(base, 0, 0)).unwrap();
        w.observe(at(base, 100, 100)).unwrap();
        let j = w.observe(at(base, 110, 110 + 3_600_000)).unwrap_err();
        assert!(j.by_ms >= 3_599_990, "{j:?}");
        // Reported once; the clock is then judged from its new position.
        assert_eq!(w.observe(at(base, 120, 120 + 3_600_000)), Ok(()));
    }

    #[test]
    fn a_backward_step_is_caught() {
        let base = Instant::now();
        let mut w = ClockWatch::new(rules());
        w.observe(at(base, 0, 0)).unwrap();
        let j = w.observe(at(base, 1000, 1000 - 50)).unwrap_err();
        assert!(j.by_ms < -40, "{j:?}");
    }

    #[test]
    fn small_steps_that_add_up_are_caught() {
        let base = Instant::now();
        let mut w = ClockWatch::new(rules());
        // Each reading gains 3 ms on 10 ms of real time: under the fixed tolerance from one
        // reading to the next, but a 30 % rate error that the anchors expose.
        let mut caught = None;
        for i in 0..200 {
            let t = i * 10;
            if w.observe(at(base, t, (t as f64 * 1.3) as i64)).is_err() {
                caught = Some(t);
                break;
            }
        }
        let t = caught.expect("creeping clock caught");
        assert!(t <= 500, "caught only after {t} ms");
    }

    #[test]
    fn time_replies_parse() {
        let r = Reply::Array(vec![
            Reply::Bulk(Bytes::from_static(b"1700000000")),
            Reply::Bulk(Bytes::from_static(b"123456")),
        ]);
        assert_eq!(parse_time(&r), Some(1_700_000_000_123_456));
        assert_eq!(parse_time(&Reply::Nil), None);
        assert_eq!(parse_time(&Reply::Array(vec![Reply::Integer(1)])), None);
    }
}
