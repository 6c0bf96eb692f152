//! Whether the dynamic IPs a deployment needs fit the subnets of a manual network, AZ by AZ
//! (BOSH §4.9: an instance takes the lowest free address of a subnet of its own AZ, and
//! fails with "no more available" when there is none).
//!
//! Instances are spread evenly over their group's AZs, so a group of `n` instances over `k`
//! AZs puts at least `n / k` (rounded down) in each. For every set of AZs, the instances
//! that must land in those AZs have to fit the subnets serving them (Hall's condition; it
//! is also sufficient, as addresses are interchangeable within a subnet). Only the lower
//! bounds are used, so no placement BOSH could still find is ever reported.

/// An AZ name, or `None` for "no AZ" (groups without `azs`, subnets without AZs).
pub type Az<'a> = Option<&'a str>;

/// Instances of one instance group that take dynamic IPs on the network.
#[derive(Debug, Clone)]
pub struct Demand<'a> {
    /// Index of the instance group in the manifest.
    pub group: usize,
    /// The group's AZs, without repeats (`[None]` when it has none).
    pub azs: Vec<Az<'a>>,
    /// Number of instances.
    pub instances: u64,
}

/// Free dynamic addresses of one subnet.
#[derive(Debug, Clone)]
pub struct Supply<'a> {
    /// The AZs the subnet serves (`[None]` when it has none).
    pub azs: Vec<Az<'a>>,
    /// Addresses left for dynamic IPs.
    pub free: u128,
}

/// A set of AZs whose instances cannot all get an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortage<'a> {
    /// The AZs.
    pub azs: Vec<Az<'a>>,
    /// Addresses the instances in those AZs need at least.
    pub needed: u128,
    /// Addresses the subnets serving those AZs have.
    pub free: u128,
    /// Groups placing instances there, with how many (at least), in manifest order.
    pub groups: Vec<(usize, u128)>,
}

/// Sets of more AZs than this are only checked as a whole (2^12 subsets at most).
const MAX_AZS: usize = 12;

/// The smallest set of AZs whose instances do not fit, if any.
pub fn shortage<'a>(demands: &[Demand<'a>], supplies: &[Supply<'a>]) -> Option<Shortage<'a>> {
    let mut universe: Vec<Az<'a>> = Vec::new();
    for az in demands.iter().flat_map(|d| &d.azs) {
        if !universe.contains(az) {
            universe.push(*az);
        }
    }
    if universe.is_empty() {
        return None;
    }
    // Bit i of a mask selects universe[i]; a set of more than MAX_AZS AZs is only checked
    // whole (u32::MAX, where every AZ counts as selected).
    let mut masks: Vec<u32> = if universe.len() > MAX_AZS {
        vec![u32::MAX]
    } else {
        (1..1u32 << universe.len()).collect()
    };
    masks.sort_by_key(|m| m.count_ones());
    masks.into_iter().find_map(|mask| {
        let set: Vec<Az<'a>> = universe
            .iter()
            .enumerate()
            .filter(|(i, _)| mask == u32::MAX || mask & (1 << i) != 0)
            .map(|(_, az)| *az)
            .collect();
        check_set(set, demands, supplies)
    })
}

fn check_set<'a>(
    set: Vec<Az<'a>>,
    demands: &[Demand<'a>],
    supplies: &[Supply<'a>],
) -> Option<Shortage<'a>> {
    let groups: Vec<(usize, u128)> = demands
        .iter()
        .map(|d| (d.group, at_least_in(d, &set)))
        .filter(|(_, n)| *n > 0)
        .collect();
    let needed: u128 = groups.iter().map(|(_, n)| n).sum();
    let free: u128 = supplies
        .iter()
        .filter(|s| s.azs.iter().any(|az| set.contains(az)))
        .map(|s| s.free)
        .fold(0, u128::saturating_add);
    (needed > free).then_some(Shortage {
        azs: set,
        needed,
        free,
        groups,
    })
}

/// The fewest instances of `d` an even spread puts in the AZs of `set`: `n / k` in each of
/// them, plus the remainder's instances that cannot all go to AZs outside the set.
fn at_least_in(d: &Demand<'_>, set: &[Az<'_>]) -> u128 {
    let k = d.azs.len() as u128;
    if k == 0 {
        return 0;
    }
    let inside = d.azs.iter().filter(|az| set.contains(az)).count() as u128;
    let (n, outside) = (u128::from(d.instances), k - inside);
    inside * (n / k) + (n % k).saturating_sub(outside)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demand(group: usize, azs: &[&'static str], instances: u64) -> Demand<'static> {
        Demand {
            group,
            azs: azs.iter().map(|a| Some(*a)).collect(),
            instances,
        }
    }

    fn supply(azs: &[&'static str], free: u128) -> Supply<'static> {
        Supply {
            azs: azs.iter().map(|a| Some(*a)).collect(),
            free,
        }
    }

    #[test]
    fn an_even_spread_puts_at_least_the_floor_in_each_az() {
        let d = demand(0, &["z1", "z2", "z3"], 7);
        assert_eq!(at_least_in(&d, &[Some("z1")]), 2);
        assert_eq!(at_least_in(&d, &[Some("z1"), Some("z2")]), 4);
        assert_eq!(at_least_in(&d, &[Some("z1"), Some("z2"), Some("z3")]), 7);
        assert_eq!(at_least_in(&d, &[Some("z9")]), 0);
    }

    #[test]
    fn one_full_az_is_a_shortage_even_when_the_total_fits() {
        let demands = [demand(0, &["z1"], 300), demand(1, &["z1", "z2"], 4)];
        let supplies = [supply(&["z1"], 225), supply(&["z2"], 225)];
        let s = shortage(&demands, &supplies).unwrap();
        assert_eq!(s.azs, vec![Some("z1")]);
        assert_eq!((s.needed, s.free), (302, 225));
        assert_eq!(s.groups, vec![(0, 300), (1, 2)]);
    }

    #[test]
    fn a_subnet_spanning_azs_serves_all_of_them() {
        let demands = [demand(0, &["z1", "z2"], 10)];
        assert_eq!(shortage(&demands, &[supply(&["z1", "z2"], 10)]), None);
        let s = shortage(&demands, &[supply(&["z1", "z2"], 9)]).unwrap();
        assert_eq!(s.azs, vec![Some("z1"), Some("z2")]);
    }

    #[test]
    fn groups_without_azs_use_subnets_without_azs() {
        let demands = [Demand {
            group: 0,
            azs: vec![None],
            instances: 3,
        }];
        let supplies = [Supply {
            azs: vec![None],
            free: 2,
        }];
        assert_eq!(shortage(&demands, &supplies).unwrap().needed, 3);
    }
}
