//! IP addresses and ranges as BOSH writes them in `static`, `reserved` and `static_ips`:
//! a single address (`10.0.0.5`), a range (`10.0.0.5 - 10.0.0.9`, spaces optional) or a CIDR
//! block (`10.0.0.0/28`).

use std::net::IpAddr;

/// An inclusive range of addresses of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpRange {
    /// First address.
    pub first: IpAddr,
    /// Last address (inclusive).
    pub last: IpAddr,
}

/// Why a text is not an IP, range or CIDR block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IpRangeError {
    /// The text is not an address, a range or a CIDR block.
    #[error("'{0}' is not an IP address, a range 'a - b' or a CIDR block")]
    Invalid(String),
    /// A range whose ends are of different families or reversed.
    #[error(
        "'{0}' is not a valid range: it must go from a lower to a higher address of the same family"
    )]
    BadRange(String),
    /// An unresolved `((variable))`.
    #[error("'{0}' is an unresolved variable")]
    Unresolved(String),
}

impl IpRange {
    /// A single address.
    pub fn single(ip: IpAddr) -> IpRange {
        IpRange {
            first: ip,
            last: ip,
        }
    }

    /// Parses one entry.
    pub fn parse(text: &str) -> Result<IpRange, IpRangeError> {
        let t = text.trim();
        if t.starts_with("((") && t.ends_with("))") {
            return Err(IpRangeError::Unresolved(t.to_string()));
        }
        if let Some((a, b)) = t.split_once('-') {
            let first: IpAddr = a
                .trim()
                .parse()
                .map_err(|_| IpRangeError::Invalid(t.into()))?;
            let last: IpAddr = b
                .trim()
                .parse()
                .map_err(|_| IpRangeError::Invalid(t.into()))?;
            if first.is_ipv4() != last.is_ipv4() || first > last {
                return Err(IpRangeError::BadRange(t.into()));
            }
            return Ok(IpRange { first, last });
        }
        if t.contains('/') {
            let net: ipnet::IpNet = t.parse().map_err(|_| IpRangeError::Invalid(t.into()))?;
            return Ok(IpRange {
                first: net.network(),
                last: net.broadcast(),
            });
        }
        t.parse()
            .map(IpRange::single)
            .map_err(|_| IpRangeError::Invalid(t.into()))
    }

    /// True when `ip` lies in this range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.first.is_ipv4() && self.first <= ip && ip <= self.last
    }

    /// True when the two ranges share an address.
    pub fn overlaps(&self, other: &IpRange) -> bool {
        self.first.is_ipv4() == other.first.is_ipv4()
            && self.first <= other.last
            && other.first <= self.last
    }

    /// Number of addresses, saturating.
    pub fn len(&self) -> u128 {
        as_u128(self.last)
            .saturating_sub(as_u128(self.first))
            .saturating_add(1)
    }

    /// Always false: a range holds at least one address.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The addresses of the range, in order.
    pub fn addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        let v4 = self.first.is_ipv4();
        (as_u128(self.first)..=as_u128(self.last)).map(move |n| from_u128(n, v4))
    }
}

/// Parses a list of entries, returning each problem with the index of its entry.
pub fn parse_ip_ranges(entries: &[String]) -> (Vec<IpRange>, Vec<(usize, IpRangeError)>) {
    let mut ranges = Vec::new();
    let mut errors = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        match IpRange::parse(e) {
            Ok(r) => ranges.push(r),
            Err(err) => errors.push((i, err)),
        }
    }
    (ranges, errors)
}

fn as_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

fn from_u128(n: u128, v4: bool) -> IpAddr {
    if v4 {
        IpAddr::V4(std::net::Ipv4Addr::from(n as u32))
    } else {
        IpAddr::V6(std::net::Ipv6Addr::from(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_range_and_cidr() {
        let r = IpRange::parse("10.244.0.2 - 10.244.0.127").unwrap();
        assert_eq!(r.len(), 126);
        assert!(r.contains("10.244.0.64".parse().unwrap()));
        assert!(!r.contains("10.244.0.128".parse().unwrap()));
        assert_eq!(IpRange::parse("10.0.0.0/30").unwrap().len(), 4);
        assert_eq!(IpRange::parse("10.0.0.7").unwrap().len(), 1);
        assert_eq!(
            IpRange::parse("10.0.0.7-10.0.0.8")
                .unwrap()
                .addresses()
                .count(),
            2
        );
    }

    #[test]
    fn rejects_nonsense() {
        assert!(matches!(
            IpRange::parse("10.0.0.300"),
            Err(IpRangeError::Invalid(_))
        ));
        assert!(matches!(
            IpRange::parse("10.0.0.9 - 10.0.0.1"),
            Err(IpRangeError::BadRange(_))
        ));
        assert!(matches!(
            IpRange::parse("((ip))"),
            Err(IpRangeError::Unresolved(_))
        ));
        assert!(matches!(
            IpRange::parse("10.0.0.1 - ::1"),
            Err(IpRangeError::BadRange(_))
        ));
    }
}
