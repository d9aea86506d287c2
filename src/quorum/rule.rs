//! What makes a quorum: `⌊N/2⌋ + 1` of one member set, or, while the set is being changed, a
//! quorum of the old members *and* a quorum of the new ones (see `docs/design.md`, "Changing the
//! masters").
//!
//! A vote reaches the union of both sets once; its ballots are indexed by position in that
//! union. A member in both sets counts for both sides. Every decision asks [`Quorum::met`] of
//! the positions that said the same thing, so one rule serves every command.

use smallvec::SmallVec;

/// At most this many members in the union of a transition (one bit each).
pub const MAX_JOINT: usize = 64;

/// The rule a vote's replies must satisfy. `Copy`, and three words: every vote carries one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quorum {
    /// The quorum outside a transition, and of the new set during one.
    need: u32,
    /// During a transition, the old set's quorum (0 outside one).
    need_old: u32,
    /// During a transition, the positions of the old set and of the new, a bit each.
    old: u64,
    new: u64,
}

/// The two sides of a transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sides {
    old: u64,
    new: u64,
    need_old: usize,
    need_new: usize,
}

impl Quorum {
    /// `⌊n/2⌋ + 1` of `n` members.
    pub fn of(n: usize) -> Quorum {
        Quorum {
            need: crate::lockop::quorum(n).min(u32::MAX as usize) as u32,
            need_old: 0,
            old: 0,
            new: 0,
        }
    }

    /// A quorum of a single position's worth: any one reply decides (the `first-master`
    /// negative control, which keeps master 0's reply only).
    pub fn one() -> Quorum {
        Quorum::of(1)
    }

    /// A quorum of the members at positions `old` and a quorum of those at positions `new`
    /// (each a list of positions in the union, at most [`MAX_JOINT`] of them).
    pub fn joint(old: &[usize], new: &[usize]) -> Quorum {
        // Positions past the 64th cannot be given (the caller refuses such a change).
        let bits = |v: &[usize]| {
            v.iter()
                .fold(0u64, |b, &i| b | 1u64.checked_shl(i as u32).unwrap_or(0))
        };
        Quorum {
            need: crate::lockop::quorum(new.len()) as u32,
            need_old: crate::lockop::quorum(old.len()) as u32,
            old: bits(old),
            new: bits(new),
        }
    }

    /// The two sides, during a transition.
    fn sides(&self) -> Option<Sides> {
        (self.need_old > 0).then_some(Sides {
            old: self.old,
            new: self.new,
            need_old: self.need_old as usize,
            need_new: self.need as usize,
        })
    }

    /// True during a transition.
    pub fn is_joint(&self) -> bool {
        self.need_old > 0
    }

    /// During a transition, which sides position `i` is on: `old`, `new` or `both`.
    pub fn side(&self, i: usize) -> Option<&'static str> {
        let s = self.sides()?;
        let on = |bits: u64| i < 64 && bits & (1 << i) != 0;
        Some(match (on(s.old), on(s.new)) {
            (true, true) => "both",
            (true, false) => "old",
            _ => "new",
        })
    }

    /// The quorum of the (new) member set, as `INFO` reports it.
    pub fn size(&self) -> usize {
        self.need as usize
    }

    /// True when the positions among `0..n` for which `who` holds form a quorum.
    pub fn met(&self, n: usize, who: impl Fn(usize) -> bool) -> bool {
        match self.sides() {
            None => (0..n).filter(|&i| who(i)).count() >= self.size(),
            Some(s) => {
                let bits = (0..n.min(64)).fold(0u64, |b, i| b | u64::from(who(i)) << i);
                s.met(bits)
            }
        }
    }

    /// True when the positions for which `who` holds could carry a grant made by any proxy
    /// still on one side alone: a quorum of either side (outside a transition, a quorum). For
    /// clean-ups that must not touch a grant they cannot see.
    pub fn could_hold(&self, n: usize, who: impl Fn(usize) -> bool) -> bool {
        match self.sides() {
            None => self.met(n, who),
            Some(s) => {
                let bits = (0..n.min(64)).fold(0u64, |b, i| b | u64::from(who(i)) << i);
                (bits & s.old).count_ones() as usize >= s.need_old
                    || (bits & s.new).count_ones() as usize >= s.need_new
            }
        }
    }

    /// True when some group of alike replies has reached a quorum, or none can any more: the
    /// groups are given as `group(i)` (the position of the first reply alike to position `i`'s,
    /// `None` for no reply) and `pending(i)` says whether position `i` may still answer.
    pub fn decided(
        &self,
        n: usize,
        group: impl Fn(usize) -> Option<usize>,
        pending: impl Fn(usize) -> bool,
    ) -> bool {
        let Some(s) = self.sides() else {
            // Counted by the callers' faster paths; kept exact here for completeness.
            let mut best = 0;
            let mut waiting = 0;
            for i in 0..n {
                if pending(i) {
                    waiting += 1;
                }
                if group(i) == Some(i) {
                    best = best.max((0..n).filter(|&j| group(j) == Some(i)).count());
                }
            }
            return best >= self.size() || best + waiting < self.size();
        };
        let n = n.min(64);
        let waiting = (0..n).fold(0u64, |b, i| b | u64::from(pending(i)) << i);
        // A group not seen yet could be made of the pending masters alone.
        let mut open = s.met(waiting);
        for i in 0..n {
            if group(i) != Some(i) {
                continue;
            }
            let members = (0..n).fold(0u64, |b, j| b | u64::from(group(j) == Some(i)) << j);
            if s.met(members) {
                return true;
            }
            open |= s.met(members | waiting);
        }
        !open
    }

    /// The largest value `v` (by `rank`) such that the positions whose value reaches `v` form
    /// a quorum: the TTL a quorum still hold, say. `values` are `(position, value)` pairs.
    pub fn th<T: Copy, K: Ord>(
        &self,
        values: impl IntoIterator<Item = (usize, T)>,
        rank: impl Fn(&T) -> K,
    ) -> Option<T> {
        let values: SmallVec<[(usize, T); 16]> = values.into_iter().collect();
        let side = |on: &dyn Fn(usize) -> bool, need: usize| {
            let mut v: SmallVec<[T; 16]> = values
                .iter()
                .filter(|(i, _)| on(*i))
                .map(|(_, t)| *t)
                .collect();
            v.sort_unstable_by_key(|t| std::cmp::Reverse(rank(t)));
            v.get(need.checked_sub(1)?).copied()
        };
        let bit = |bits: u64| move |i: usize| i < 64 && bits & (1 << i) != 0;
        match self.sides() {
            None => side(&|_| true, self.size()),
            Some(s) => {
                let (a, b) = (
                    side(&bit(s.old), s.need_old)?,
                    side(&bit(s.new), s.need_new)?,
                );
                Some(if rank(&a) <= rank(&b) { a } else { b })
            }
        }
    }
}

impl Sides {
    fn met(&self, bits: u64) -> bool {
        (bits & self.old).count_ones() as usize >= self.need_old
            && (bits & self.new).count_ones() as usize >= self.need_new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// {A,B,C} → {A,B,D}: union positions A0 B1 C2 D3.
    fn abc_to_abd() -> Quorum {
        Quorum::joint(&[0, 1, 2], &[0, 1, 3])
    }

    #[test]
    fn a_joint_quorum_needs_both_sides() {
        let q = abc_to_abd();
        let set = |v: &'static [usize]| move |i: usize| v.contains(&i);
        assert!(q.met(4, set(&[0, 1])), "A and B are in both");
        assert!(q.met(4, set(&[0, 2, 3])));
        assert!(!q.met(4, set(&[0, 2])), "a quorum of the old set only");
        assert!(!q.met(4, set(&[0, 3])), "a quorum of the new set only");
        assert!(q.could_hold(4, set(&[0, 2])));
        assert!(!q.could_hold(4, set(&[2, 3])));
        // Outside a transition, the plain count.
        assert!(Quorum::of(3).met(3, set(&[0, 2])));
        assert!(!Quorum::of(3).met(3, set(&[2])));
    }

    #[test]
    fn shrinking_needs_the_old_quorum_too() {
        // {A,B,C,D,E} → {A,B,C}: C, D and E are a quorum of the old set; A and B of the new.
        let q = Quorum::joint(&[0, 1, 2, 3, 4], &[0, 1, 2]);
        assert!(!q.met(5, |i| i < 2));
        assert!(
            !q.met(5, |i| i >= 2),
            "C, D and E: the old quorum, one new member"
        );
        assert!(q.met(5, |i| i <= 2));
    }

    #[test]
    fn decided_when_a_group_meets_both_sides_or_none_can() {
        let q = abc_to_abd();
        // A and B said yes: decided.
        let g = [Some(0), Some(0), None, None];
        assert!(q.decided(4, |i| g[i], |i| g[i].is_none()));
        // A yes, C yes, B and D pending: the yes group can still reach both sides.
        let g = [Some(0), None, Some(0), None];
        assert!(!q.decided(4, |i| g[i], |i| g[i].is_none()));
        // A yes, C yes, B and D failed: the new side cannot be reached by anyone.
        assert!(q.decided(4, |i| g[i], |_| false));
        // A yes, B no, C and D pending: still open either way.
        let g = [Some(0), Some(1), None, None];
        assert!(!q.decided(4, |i| g[i], |i| g[i].is_none()));
    }

    #[test]
    fn the_quorum_th_value_is_the_smaller_of_both_sides() {
        let q = abc_to_abd();
        // TTLs: A 100, B 50, C 90, D 10. Old side: 2nd largest of {100,50,90} = 90; new side:
        // 2nd largest of {100,50,10} = 50.
        let ttls = [(0, 100), (1, 50), (2, 90), (3, 10)];
        assert_eq!(q.th(ttls, |t| *t), Some(50));
        assert_eq!(Quorum::of(4).th(ttls, |t| *t), Some(50));
        assert_eq!(Quorum::of(3).th([(0, 7), (2, 9)], |t| *t), Some(7));
        assert_eq!(
            q.th([(0, 1), (2, 1)], |t| *t),
            None,
            "nothing from the new side"
        );
    }
}
