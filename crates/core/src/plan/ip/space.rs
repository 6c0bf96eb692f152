//! Address arithmetic: addresses as numbers per family, and sets of address intervals in
//! which the lowest free block is found by jumping over what is taken, never by walking
//! addresses (an IPv6 subnet holds 2^64 of them).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Bound::{Excluded, Included};

/// Index of an address family in per-family tables: 0 for IPv4, 1 for IPv6.
pub(super) type Family = usize;

/// The family of `ip`.
pub(super) fn family(ip: IpAddr) -> Family {
    usize::from(ip.is_ipv6())
}

/// `ip` as a number.
pub(super) fn number(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The address numbered `n` in `family`; IPv4 numbers are truncated to 32 bits (callers
/// only pass numbers that came from IPv4 addresses).
pub(super) fn address(family: Family, n: u128) -> IpAddr {
    if family == 0 {
        IpAddr::V4(Ipv4Addr::from(n as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from(n))
    }
}

/// Address length in bits: 32 or 128.
pub(super) fn bits(family: Family) -> u8 {
    if family == 0 { 32 } else { 128 }
}

/// The prefix of a single address of `ip`'s family: 32 or 128.
pub(super) fn host_prefix(ip: IpAddr) -> u8 {
    bits(family(ip))
}

/// The host part of a `prefix`-long block: `2^(bits - prefix) - 1`. A prefix longer than
/// the family allows counts as a single address.
pub(super) fn host_mask(family: Family, prefix: u8) -> u128 {
    let host_bits = u32::from(bits(family).saturating_sub(prefix));
    if host_bits >= 128 {
        u128::MAX
    } else {
        (1u128 << host_bits) - 1
    }
}

/// The first multiple of the block size `mask + 1` at or above `n`; `None` past the end of
/// the address space.
pub(super) fn align_up(n: u128, mask: u128) -> Option<u128> {
    n.checked_add(mask).map(|m| m & !mask)
}

/// Disjoint, merged intervals of address numbers (one family), ordered.
#[derive(Debug, Clone, Default)]
pub(super) struct IntervalSet {
    /// First number of each interval to its last (inclusive).
    map: BTreeMap<u128, u128>,
}

impl IntervalSet {
    /// Adds `first..=last`, merging it with the intervals it touches.
    pub(super) fn insert(&mut self, first: u128, last: u128) {
        let (mut first, mut last) = (first.min(last), first.max(last));
        if let Some((&start, &end)) = self.map.range(..=first).next_back()
            && end.saturating_add(1) >= first
        {
            first = start;
            last = last.max(end);
            self.map.remove(&start);
        }
        while let Some((&start, &end)) = self.map.range(first..).next() {
            if start > last.saturating_add(1) {
                break;
            }
            last = last.max(end);
            self.map.remove(&start);
        }
        self.map.insert(first, last);
    }

    /// The lowest interval sharing a number with `first..=last`.
    pub(super) fn first_overlap(&self, first: u128, last: u128) -> Option<(u128, u128)> {
        if let Some((&start, &end)) = self.map.range(..=first).next_back()
            && end >= first
        {
            return Some((start, end));
        }
        self.map
            .range((Excluded(first), Included(last)))
            .next()
            .map(|(&start, &end)| (start, end))
    }

    /// The lowest `mask + 1`-sized, aligned block inside `from..=to` that overlaps neither
    /// this set nor `other`, searching upwards from `from`.
    pub(super) fn lowest_free_block(
        &self,
        other: &IntervalSet,
        from: u128,
        to: u128,
        mask: u128,
    ) -> Option<u128> {
        let mut start = align_up(from, mask)?;
        loop {
            let end = start.checked_add(mask)?;
            if end > to {
                return None;
            }
            let blocker = self
                .first_overlap(start, end)
                .or_else(|| other.first_overlap(start, end));
            match blocker {
                // Every aligned block that starts inside the blocker overlaps it too.
                Some((_, blocked_to)) => start = align_up(blocked_to.checked_add(1)?, mask)?,
                None => return Some(start),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(intervals: &[(u128, u128)]) -> IntervalSet {
        let mut s = IntervalSet::default();
        for &(a, b) in intervals {
            s.insert(a, b);
        }
        s
    }

    #[test]
    fn intervals_merge_when_they_touch_or_overlap() {
        let s = set(&[(10, 12), (13, 15), (20, 20), (14, 21), (30, 31)]);
        assert_eq!(
            s.map.iter().map(|(a, b)| (*a, *b)).collect::<Vec<_>>(),
            vec![(10, 21), (30, 31)]
        );
        let s = set(&[
            (u128::MAX, u128::MAX),
            (0, 0),
            (u128::MAX - 1, u128::MAX - 1),
        ]);
        assert_eq!(s.map.len(), 2);
        assert_eq!(
            s.first_overlap(u128::MAX - 5, u128::MAX),
            Some((u128::MAX - 1, u128::MAX))
        );
    }

    #[test]
    fn lowest_free_block_jumps_over_taken_intervals() {
        let taken = set(&[(0, 0), (2, 5)]);
        let none = IntervalSet::default();
        assert_eq!(taken.lowest_free_block(&none, 0, 255, 0), Some(1));
        assert_eq!(taken.lowest_free_block(&none, 2, 255, 0), Some(6));
        // Blocks of 4 (a /30 in a /24): 0..=3 and 4..=7 are touched.
        assert_eq!(taken.lowest_free_block(&none, 0, 255, 3), Some(8));
        assert_eq!(
            taken.lowest_free_block(&set(&[(8, 8)]), 0, 255, 3),
            Some(12)
        );
        assert_eq!(taken.lowest_free_block(&none, 0, 5, 0), Some(1));
        assert_eq!(set(&[(0, 255)]).lowest_free_block(&none, 0, 255, 0), None);
        assert_eq!(
            set(&[(0, u128::MAX)]).lowest_free_block(&none, 0, u128::MAX, 0),
            None
        );
    }

    #[test]
    fn host_masks_per_family_and_prefix() {
        assert_eq!(host_mask(0, 32), 0);
        assert_eq!(host_mask(0, 28), 15);
        assert_eq!(host_mask(1, 128), 0);
        assert_eq!(host_mask(1, 0), u128::MAX);
        assert_eq!(host_mask(0, 40), 0);
        assert_eq!(align_up(5, 3), Some(8));
        assert_eq!(align_up(u128::MAX, 3), None);
    }
}
