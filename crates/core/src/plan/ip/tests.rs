use std::net::IpAddr;

use serde_json::json;

use super::*;
use crate::manifest::{CloudConfig, NetworkRef};

const DEPLOYMENT: &str = "dep";

fn cloud(yaml: &str) -> CloudConfig {
    kubosh_base::yaml::parse(yaml, "cloud-config").unwrap()
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn dynamic(group: &str, index: u32, az: Option<&str>, network: &str) -> IpRequest {
    IpRequest {
        group: group.into(),
        index,
        instance_id: format!("{group}-{index}"),
        az: az.map(String::from),
        network: network.into(),
        static_ip: None,
        default_for: vec!["dns".into(), "gateway".into()],
        nic_group: None,
    }
}

fn fixed(group: &str, index: u32, az: Option<&str>, network: &str, at: &str) -> IpRequest {
    IpRequest {
        static_ip: Some(ip(at)),
        ..dynamic(group, index, az, network)
    }
}

fn held_by(deployment: &str, instance_id: &str, network: &str, at: &str) -> Reservation {
    Reservation {
        ip: ip(at),
        prefix: 32,
        network: network.into(),
        group: "other".into(),
        instance_id: instance_id.into(),
        deployment: deployment.into(),
        is_static: false,
    }
}

fn ips(allocation: &Allocation) -> Vec<String> {
    allocation
        .assigned
        .iter()
        .map(|a| a.ip().map_or("-".into(), |ip| ip.to_string()))
        .collect()
}

fn messages(errors: &[IpError]) -> Vec<(u32, String)> {
    errors.iter().map(|e| (e.code(), e.to_string())).collect()
}

const ZONED: &str = r#"
azs: [{name: z1}, {name: z2}]
networks:
- name: default
  subnets:
  - range: 10.0.0.0/24
    gateway: 10.0.0.1
    reserved: [10.0.0.2 - 10.0.0.5]
    static: [10.0.0.6 - 10.0.0.8]
    az: z1
    dns: [8.8.8.8]
    cloud_properties: {name: net-a}
  - range: 10.0.1.0/24
    gateway: 10.0.1.1
    static: [10.0.1.10 - 10.0.1.20]
    azs: [z2]
- name: public
  type: vip
  cloud_properties: {kind: elastic}
- name: pool
  type: vip
  subnets:
  - static: [203.0.113.10 - 203.0.113.11]
    az: z1
- name: iaas
  type: dynamic
  subnets:
  - az: z1
    dns: [1.1.1.1]
    cloud_properties: {net: dyn-z1}
  - az: z2
    cloud_properties: {net: dyn-z2}
"#;

#[test]
fn dynamic_addresses_are_the_lowest_free_ones_of_the_instances_az() {
    let cc = cloud(ZONED);
    // Another deployment holds .9 and .11; the network, gateway, reserved and static
    // addresses are never handed out.
    let elsewhere = [
        held_by("other", "o1", "default", "10.0.0.9"),
        held_by("other", "o2", "default", "10.0.0.11"),
    ];
    let requests = [
        dynamic("web", 0, Some("z1"), "default"),
        dynamic("web", 1, Some("z1"), "default"),
        dynamic("web", 2, Some("z2"), "default"),
        dynamic("web", 3, Some("z1"), "default"),
    ];
    let a = allocate(DEPLOYMENT, &cc, &requests, &[], &elsewhere).unwrap();
    assert_eq!(ips(&a), ["10.0.0.10", "10.0.0.12", "10.0.1.2", "10.0.0.13"]);
    assert!(a.assigned.iter().all(|x| !x.kept && !x.is_static()));
    assert!(a.released.is_empty());
    let r = a.assigned[2].reservation.as_ref().unwrap();
    assert_eq!(
        (
            r.network.as_str(),
            r.group.as_str(),
            r.deployment.as_str(),
            r.prefix
        ),
        ("default", "web", DEPLOYMENT, 32)
    );
}

#[test]
fn a_redeploy_keeps_every_reservation() {
    let cc = cloud(ZONED);
    let requests = [
        dynamic("web", 0, Some("z1"), "default"),
        fixed("web", 1, Some("z1"), "default", "10.0.0.7"),
        fixed("web", 1, Some("z1"), "public", "198.51.100.7"),
        dynamic("web", 2, Some("z1"), "pool"),
        dynamic("web", 3, Some("z2"), "iaas"),
    ];
    let mut requests = requests.to_vec();
    for r in &mut requests[2..4] {
        r.default_for.clear();
    }
    let first = allocate(DEPLOYMENT, &cc, &requests, &[], &[]).unwrap();
    assert_eq!(
        ips(&first),
        ["10.0.0.9", "10.0.0.7", "198.51.100.7", "203.0.113.10", "-"]
    );
    let statics: Vec<bool> = first.assigned.iter().map(Assigned::is_static).collect();
    assert_eq!(statics, [false, true, true, false, false]);

    let second = allocate(DEPLOYMENT, &cc, &requests, &first.held(), &[]).unwrap();
    assert_eq!(ips(&second), ips(&first));
    let kept: Vec<bool> = second.assigned.iter().map(|a| a.kept).collect();
    // Nothing is reserved on a dynamic network, so there is nothing to keep there.
    assert_eq!(kept, [true, true, true, true, false]);
    assert!(second.released.is_empty());
    assert_eq!(second.held(), first.held());
    for (a, b) in first.assigned.iter().zip(&second.assigned) {
        assert_eq!(a.settings, b.settings);
    }
}

#[test]
fn scaling_down_releases_the_removed_instances_addresses() {
    let cc = cloud(ZONED);
    let three: Vec<IpRequest> = (0..3)
        .map(|i| dynamic("web", i, Some("z1"), "default"))
        .collect();
    let first = allocate(DEPLOYMENT, &cc, &three, &[], &[]).unwrap();
    let second = allocate(DEPLOYMENT, &cc, &three[..2], &first.held(), &[]).unwrap();
    assert_eq!(ips(&second), ["10.0.0.9", "10.0.0.10"]);
    assert!(second.assigned.iter().all(|a| a.kept));
    assert_eq!(second.released.len(), 1);
    assert_eq!(second.released[0].ip, ip("10.0.0.11"));
    assert_eq!(second.released[0].instance_id, "web-2");
}

#[test]
fn a_full_network_fails_with_the_directors_words() {
    let cc = cloud(
        r#"
networks:
- name: tiny
  subnets: [{range: 10.0.0.0/29, gateway: 10.0.0.1, reserved: [10.0.0.6]}]
"#,
    );
    // .0 network, .1 gateway, .6 reserved, .7 broadcast: four addresses.
    let requests: Vec<IpRequest> = (0..6).map(|i| dynamic("web", i, None, "tiny")).collect();
    let errors = allocate(DEPLOYMENT, &cc, &requests, &[], &[]).unwrap_err();
    assert_eq!(
        messages(&errors),
        [
            (
                130011,
                "Failed to reserve IP for 'web/web-4 (4)' for manual network 'tiny': no more available"
                    .to_string()
            ),
            (
                130011,
                "Failed to reserve IP for 'web/web-5 (5)' for manual network 'tiny': no more available"
                    .to_string()
            ),
        ]
    );
    let fits = allocate(DEPLOYMENT, &cc, &requests[..4], &[], &[]).unwrap();
    assert_eq!(ips(&fits), ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"]);
}

#[test]
fn swapping_static_ips_between_instances_fails_as_in_the_director() {
    let cc = cloud(ZONED);
    let before = allocate(
        DEPLOYMENT,
        &cc,
        &[
            fixed("web", 0, Some("z1"), "default", "10.0.0.6"),
            fixed("web", 1, Some("z1"), "default", "10.0.0.7"),
        ],
        &[],
        &[],
    )
    .unwrap();
    let swapped = [
        fixed("web", 0, Some("z1"), "default", "10.0.0.7"),
        fixed("web", 1, Some("z1"), "default", "10.0.0.6"),
    ];
    let errors = allocate(DEPLOYMENT, &cc, &swapped, &before.held(), &[]).unwrap_err();
    assert_eq!(
        messages(&errors),
        [
            (
                130008,
                "Failed to reserve IP '10.0.0.7/32' for instance 'web/web-0 (0)': already reserved by instance 'web/web-1' from deployment 'dep'"
                    .to_string()
            ),
            (
                130008,
                "Failed to reserve IP '10.0.0.6/32' for instance 'web/web-1 (1)': already reserved by instance 'web/web-0' from deployment 'dep'"
                    .to_string()
            ),
        ]
    );
}

#[test]
fn a_static_ip_cannot_move_from_a_deleted_instance_in_the_same_deploy() {
    let cc = cloud(ZONED);
    let before = allocate(
        DEPLOYMENT,
        &cc,
        &[fixed("old", 0, Some("z1"), "default", "10.0.0.8")],
        &[],
        &[],
    )
    .unwrap();
    // Group `old` is gone; `new` wants its address while `old/old-0` still holds it.
    let errors = allocate(
        DEPLOYMENT,
        &cc,
        &[fixed("new", 0, Some("z1"), "default", "10.0.0.8")],
        &before.held(),
        &[],
    )
    .unwrap_err();
    assert_eq!(
        messages(&errors),
        [(
            130008,
            "Failed to reserve IP '10.0.0.8/32' for instance 'new/new-0 (0)': already reserved by instance 'old/old-0' from deployment 'dep'"
                .to_string()
        )]
    );
    // Another deployment's address is named with that deployment.
    let errors = allocate(
        DEPLOYMENT,
        &cc,
        &[fixed("new", 0, Some("z1"), "default", "10.0.0.8")],
        &[],
        &[held_by("db", "x1", "default", "10.0.0.8")],
    )
    .unwrap_err();
    assert_eq!(
        errors[0].to_string(),
        "Failed to reserve IP '10.0.0.8/32' for instance 'new/new-0 (0)': already reserved by instance 'other/x1' from deployment 'db'"
    );
}

#[test]
fn static_ips_outside_subnets_or_restricted_are_reported_together() {
    let cc = cloud(ZONED);
    let requests = [
        fixed("web", 0, Some("z1"), "default", "10.9.0.6"),
        dynamic("web", 1, Some("z1"), "nowhere"),
        fixed("web", 2, Some("z1"), "default", "10.0.0.3"),
        fixed("web", 3, Some("z1"), "default", "10.0.0.1"),
        fixed("web", 4, Some("z1"), "default", "10.0.0.100"),
        fixed("web", 5, Some("z1"), "iaas", "10.0.0.6"),
        fixed("web", 6, Some("z1"), "pool", "203.0.113.10"),
    ];
    let errors = allocate(DEPLOYMENT, &cc, &requests, &[], &[]).unwrap_err();
    let expected: Vec<(u32, &str)> = vec![
        (
            130012,
            "Provided static IP '10.9.0.6/32' does not belong to any subnet in network 'default'",
        ),
        (
            150001,
            "Instance group 'web' references an unknown network 'nowhere'",
        ),
        (
            130013,
            "Failed to reserve IP '10.0.0.3/32' for network 'default': IP belongs to reserved range",
        ),
        (
            130013,
            "Failed to reserve IP '10.0.0.1/32' for network 'default': IP belongs to reserved range",
        ),
        (
            130009,
            "IP '10.0.0.100/32' on network 'default' does not belong to static pool",
        ),
        (
            150008,
            "Instance group 'web' using dynamic network 'iaas' cannot specify static IP(s)",
        ),
        (
            130014,
            "IPs cannot be specified in both the instance group and the cloud config",
        ),
    ];
    let got = messages(&errors);
    let got: Vec<(u32, &str)> = got.iter().map(|(c, m)| (*c, m.as_str())).collect();
    assert_eq!(got, expected);
}

#[test]
fn existing_reservations_that_no_longer_fit_are_replaced_and_released() {
    let cc = cloud(ZONED);
    let existing = [
        // Dynamic, but .7 is now a static address.
        Reservation {
            group: "web".into(),
            ..held_by(DEPLOYMENT, "web-0", "default", "10.0.0.7")
        },
        // In z1's subnet, but the instance moved to z2.
        Reservation {
            group: "web".into(),
            ..held_by(DEPLOYMENT, "web-1", "default", "10.0.0.20")
        },
        // Now reserved.
        Reservation {
            group: "web".into(),
            ..held_by(DEPLOYMENT, "web-2", "default", "10.0.0.4")
        },
    ];
    let requests = [
        dynamic("web", 0, Some("z1"), "default"),
        dynamic("web", 1, Some("z2"), "default"),
        dynamic("web", 2, Some("z1"), "default"),
    ];
    let a = allocate(DEPLOYMENT, &cc, &requests, &existing, &[]).unwrap();
    assert_eq!(ips(&a), ["10.0.0.9", "10.0.1.2", "10.0.0.10"]);
    assert!(a.assigned.iter().all(|x| !x.kept));
    assert_eq!(a.released, existing.to_vec());
}

#[test]
fn a_renamed_network_keeps_the_addresses_it_can_hold() {
    let before = cloud(ZONED);
    let first = allocate(
        DEPLOYMENT,
        &before,
        &[dynamic("web", 0, Some("z1"), "default")],
        &[],
        &[],
    )
    .unwrap();
    let after = cloud(&ZONED.replace("- name: default", "- name: private"));
    let second = allocate(
        DEPLOYMENT,
        &after,
        &[dynamic("web", 0, Some("z1"), "private")],
        &first.held(),
        &[],
    )
    .unwrap();
    assert_eq!(ips(&second), ["10.0.0.9"]);
    assert!(second.assigned[0].kept);
    assert_eq!(second.held()[0].network, "private");
    assert!(second.released.is_empty());
}

#[test]
fn ipv6_subnets_are_never_walked() {
    let cc = cloud(
        r#"
networks:
- name: v6
  subnets:
  - range: fd00::/64
    gateway: fd00::1
    reserved: ["fd00::2 - fd00::ffff:ffff:ffff"]
    static: ["fd00::1:0:0:0 - fd00::1:0:0:ff"]
"#,
    );
    let requests: Vec<IpRequest> = (0..3).map(|i| dynamic("v", i, None, "v6")).collect();
    let elsewhere = [Reservation {
        prefix: 128,
        ..held_by("other", "o", "v6", "fd00::1:0:0:100")
    }];
    let a = allocate(DEPLOYMENT, &cc, &requests, &[], &elsewhere).unwrap();
    assert_eq!(
        ips(&a),
        ["fd00::1:0:0:101", "fd00::1:0:0:102", "fd00::1:0:0:103"]
    );
    assert_eq!(a.assigned[0].reservation.as_ref().unwrap().prefix, 128);
    assert_eq!(
        a.assigned[0].settings.to_json(),
        json!({"type": "manual", "ip": "fd00::1:0:0:101", "prefix": "128",
               "netmask": "ffff:ffff:ffff:ffff:0000:0000:0000:0000", "cloud_properties": {},
               "default": ["dns", "gateway"], "gateway": "fd00::1"})
    );
    // The whole /64 taken but its last address: found in one jump.
    let full = cloud(
        r#"
networks:
- name: v6
  subnets: [{range: "fd00::/64", gateway: "fd00::1", reserved: ["fd00::2 - fd00::ffff:ffff:ffff:fffd"]}]
"#,
    );
    let a = allocate(DEPLOYMENT, &full, &requests[..1], &[], &[]).unwrap();
    assert_eq!(ips(&a), ["fd00::ffff:ffff:ffff:fffe"]);
    let errors = allocate(DEPLOYMENT, &full, &requests[..2], &[], &[]).unwrap_err();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].code(), 130011);
}

#[test]
fn delegated_prefixes_take_aligned_blocks() {
    let cc = cloud(
        r#"
networks:
- name: pods
  subnets: [{range: 10.0.0.0/24, gateway: 10.0.0.1, prefix: 28, reserved: [10.0.0.40]}]
"#,
    );
    let requests: Vec<IpRequest> = (0..3).map(|i| dynamic("k", i, None, "pods")).collect();
    let a = allocate(DEPLOYMENT, &cc, &requests, &[], &[]).unwrap();
    // .0/28 holds the network address and the gateway, .32/28 the reserved .40.
    assert_eq!(ips(&a), ["10.0.0.16", "10.0.0.48", "10.0.0.64"]);
    assert_eq!(a.assigned[0].reservation.as_ref().unwrap().prefix, 28);
    assert_eq!(a.assigned[0].settings.prefix, "28");
    let again = allocate(DEPLOYMENT, &cc, &requests, &a.held(), &[]).unwrap();
    assert!(again.assigned.iter().all(|x| x.kept));
}

#[test]
fn vip_networks_pick_listed_addresses_or_take_the_instances() {
    let cc = cloud(ZONED);
    let mut requests: Vec<IpRequest> = (0..3)
        .map(|i| dynamic("lb", i, Some("z1"), "pool"))
        .collect();
    for r in &mut requests {
        r.default_for.clear();
    }
    let elsewhere = [held_by("other", "o", "pool", "203.0.113.10")];
    let errors = allocate(DEPLOYMENT, &cc, &requests, &[], &elsewhere).unwrap_err();
    assert_eq!(
        messages(&errors),
        [
            (
                130011,
                "Failed to reserve IP for 'lb/lb-1 (1)' for vip network 'pool': no more available"
                    .to_string()
            ),
            (
                130011,
                "Failed to reserve IP for 'lb/lb-2 (2)' for vip network 'pool': no more available"
                    .to_string()
            ),
        ]
    );
    let a = allocate(DEPLOYMENT, &cc, &requests[..1], &[], &elsewhere).unwrap();
    assert_eq!(ips(&a), ["203.0.113.11"]);
    // Instance-given vip addresses are static reservations, checked against holders.
    let mut own = fixed("lb", 0, Some("z1"), "public", "198.51.100.1");
    own.default_for.clear();
    let errors = allocate(
        DEPLOYMENT,
        &cc,
        &[own.clone()],
        &[],
        &[held_by("other", "o", "public", "198.51.100.1")],
    )
    .unwrap_err();
    assert_eq!(errors[0].code(), 130008);
    own.static_ip = None;
    let errors = allocate(DEPLOYMENT, &cc, &[own], &[], &[]).unwrap_err();
    assert_eq!(errors[0].code(), 130005);
}

#[test]
fn network_settings_are_the_directors_json() {
    let cc = cloud(ZONED);
    let mut manual = fixed("web", 0, Some("z1"), "default", "10.0.0.6");
    manual.nic_group = Some("1".into());
    let settings = network_settings(&cc, &manual, Some(ip("10.0.0.6"))).unwrap();
    assert_eq!(
        serde_json::to_string(&settings).unwrap(),
        r#"{"type":"manual","ip":"10.0.0.6","prefix":"32","netmask":"255.255.255.0","cloud_properties":{"name":"net-a"},"default":["dns","gateway"],"nic_group":"1","dns":["8.8.8.8"],"gateway":"10.0.0.1"}"#
    );
    let mut secondary = dynamic("web", 0, Some("z2"), "default");
    secondary.default_for.clear();
    let settings = network_settings(&cc, &secondary, Some(ip("10.0.1.9"))).unwrap();
    assert_eq!(
        serde_json::to_string(&settings).unwrap(),
        r#"{"type":"manual","ip":"10.0.1.9","prefix":"32","netmask":"255.255.255.0","cloud_properties":{},"gateway":"10.0.1.1"}"#
    );

    let iaas = dynamic("web", 0, Some("z1"), "iaas");
    let settings = network_settings(&cc, &iaas, None).unwrap();
    assert_eq!(
        serde_json::to_string(&settings).unwrap(),
        r#"{"type":"dynamic","cloud_properties":{"net":"dyn-z1"},"prefix":"32","dns":["1.1.1.1"],"default":["dns","gateway"]}"#
    );
    // Once the agent reported its address, the Director adds it after the rest.
    let mut learned = settings.clone();
    learned.ip = Some(ip("10.5.0.3"));
    learned.netmask = Some("255.255.0.0".into());
    learned.gateway = Some(ip("10.5.0.1"));
    assert_eq!(
        serde_json::to_string(&learned).unwrap(),
        r#"{"type":"dynamic","cloud_properties":{"net":"dyn-z1"},"prefix":"32","dns":["1.1.1.1"],"default":["dns","gateway"],"ip":"10.5.0.3","netmask":"255.255.0.0","gateway":"10.5.0.1"}"#
    );
    let errors = network_settings(&cc, &dynamic("web", 0, Some("z3"), "iaas"), None).unwrap_err();
    assert_eq!(
        (errors.code(), errors.to_string()),
        (
            160009,
            "Network 'iaas' has no matching subnet for availability zone 'z3'".to_string()
        )
    );

    let mut vip = fixed("web", 0, Some("z1"), "public", "198.51.100.7");
    vip.default_for.clear();
    vip.nic_group = Some("2".into());
    let settings = network_settings(&cc, &vip, Some(ip("198.51.100.7"))).unwrap();
    assert_eq!(
        serde_json::to_string(&settings).unwrap(),
        r#"{"type":"vip","ip":"198.51.100.7","cloud_properties":{"kind":"elastic"},"prefix":"32","nic_group":"2"}"#
    );
    vip.default_for = vec!["gateway".into()];
    let error = network_settings(&cc, &vip, Some(ip("198.51.100.7"))).unwrap_err();
    assert_eq!(
        (error.code(), error.to_string()),
        (
            130007,
            "Can't provide any defaults since this is a VIP network".to_string()
        )
    );
}

#[test]
fn default_lists_follow_the_group_networks() {
    let net = |name: &str, default: &[&str]| NetworkRef {
        name: name.into(),
        default: default.iter().map(|d| d.to_string()).collect(),
        ..NetworkRef::default()
    };
    // The only network is the default for dns and gateway (not addressable).
    assert_eq!(default_for(&[net("a", &[])], "a"), ["dns", "gateway"]);
    let two = [net("a", &["gateway", "addressable", "dns"]), net("b", &[])];
    assert_eq!(default_for(&two, "a"), ["addressable", "dns", "gateway"]);
    assert!(default_for(&two, "b").is_empty());
    assert!(default_for(&[net("a", &[])], "b").is_empty());
}

#[test]
fn static_ips_give_the_azs_of_their_subnets() {
    let cc = cloud(ZONED);
    assert_eq!(
        static_ip_azs(&cc, "web", "default", &[ip("10.0.1.12"), ip("10.0.0.6")]).unwrap(),
        vec![
            (ip("10.0.1.12"), vec!["z2".to_string()]),
            (ip("10.0.0.6"), vec!["z1".to_string()])
        ]
    );
    let error = static_ip_azs(&cc, "web", "default", &[ip("10.0.0.50")]).unwrap_err();
    assert_eq!(
        (error.code(), error.to_string()),
        (
            150002,
            "Instance group 'web' with network 'default' declares static ip '10.0.0.50/32', which belongs to no subnet"
                .to_string()
        )
    );
    assert_eq!(
        static_ip_azs(&cc, "web", "iaas", &[ip("10.0.0.6")])
            .unwrap_err()
            .code(),
        150008
    );
    assert_eq!(
        static_ip_azs(&cc, "web", "nope", &[]).unwrap_err().code(),
        150001
    );
}

#[test]
fn ten_thousand_instances_in_a_slash_16() {
    let cc = cloud(
        r#"
networks:
- name: big
  subnets:
  - range: 10.1.0.0/16
    gateway: 10.1.0.1
    reserved: [10.1.0.7, 10.1.0.9, 10.1.0.11, 10.1.3.0 - 10.1.3.255]
    static: [10.1.200.0 - 10.1.200.255]
"#,
    );
    let requests: Vec<IpRequest> = (0..10_000)
        .map(|i| dynamic("big", i, None, "big"))
        .collect();
    let a = allocate(DEPLOYMENT, &cc, &requests, &[], &[]).unwrap();
    let all: std::collections::BTreeSet<IpAddr> =
        a.assigned.iter().filter_map(Assigned::ip).collect();
    assert_eq!(all.len(), 10_000);
    assert_eq!(a.assigned[0].ip(), Some(ip("10.1.0.2")));
    assert_eq!(a.assigned[5].ip(), Some(ip("10.1.0.8")));
    // 2..=255 minus 3 reserved = 251 in 10.1.0.x; all of 10.1.1.x and 10.1.2.x; 10.1.3.x reserved.
    assert_eq!(a.assigned[251 + 512].ip(), Some(ip("10.1.4.0")));
    assert!(!all.contains(&ip("10.1.3.0")));
    let again = allocate(DEPLOYMENT, &cc, &requests, &a.held(), &[]).unwrap();
    assert!(again.assigned.iter().all(|x| x.kept));
}

mod arbitrary {
    use proptest::prelude::*;

    use super::*;

    /// Addresses near the subnets of `ZONED` and of an IPv6 range, plus some far away.
    fn any_ip() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            (0u8..2, any::<u8>()).prop_map(|(c, d)| ip(&format!("10.0.{c}.{d}"))),
            any::<u8>().prop_map(|d| ip(&format!("203.0.113.{d}"))),
            any::<u16>().prop_map(|d| ip(&format!("fd00::{d:x}"))),
            any::<u32>().prop_map(|n| IpAddr::V4(n.into())),
        ]
    }

    fn any_request() -> impl Strategy<Value = IpRequest> {
        (
            0u32..6,
            prop::option::of(prop_oneof![Just("z1"), Just("z2"), Just("z9")]),
            prop_oneof![
                8 => Just("default"),
                1 => Just("public"),
                1 => Just("pool"),
                1 => Just("iaas"),
                1 => Just("nowhere"),
            ],
            prop::option::weighted(0.1, any_ip()),
        )
            .prop_map(|(index, az, network, static_ip)| IpRequest {
                static_ip,
                ..dynamic("g", index, az, network)
            })
    }

    fn any_reservation() -> impl Strategy<Value = Reservation> {
        (
            0u32..8,
            any_ip(),
            any::<u8>(),
            prop_oneof![Just("default"), Just("pool"), Just("gone")],
        )
            .prop_map(|(index, at, prefix, network)| Reservation {
                ip: at,
                prefix,
                network: network.into(),
                group: "g".into(),
                instance_id: format!("g-{index}"),
                deployment: DEPLOYMENT.into(),
                is_static: index % 2 == 0,
            })
    }

    proptest! {
        /// Any requests and reservations, however inconsistent: no panic, the same answer
        /// twice, and on success one answer per request, new addresses held by nobody else.
        #[test]
        fn allocation_is_total_and_deterministic(
            requests in prop::collection::vec(any_request(), 0..12),
            existing in prop::collection::vec(any_reservation(), 0..8),
        ) {
            let mut existing = existing;
            let mut addresses = std::collections::HashSet::new();
            existing.retain(|e| addresses.insert(e.ip));
            let cc = cloud(ZONED);
            let first = allocate(DEPLOYMENT, &cc, &requests, &existing, &[]);
            let second = allocate(DEPLOYMENT, &cc, &requests, &existing, &[]);
            prop_assert_eq!(&first, &second);
            if let Ok(a) = first {
                prop_assert_eq!(a.assigned.len(), requests.len());
                for x in a.assigned.iter().filter(|x| !x.kept) {
                    let Some(new) = &x.reservation else { continue };
                    for e in existing.iter().filter(|e| e.instance_id != new.instance_id) {
                        prop_assert_ne!(e.ip, new.ip);
                    }
                }
            }
        }
    }
}
