//! The addresses a reconcile push never connects to (DL-2), unless
//! `SLIPWAY_CALLBACK_ALLOW_PRIVATE` is set for development.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a push must not connect to `ip`, or `None` for an address it may
/// connect to (DL-2: a callback URL must not reach the api's own host or
/// networks).
///
/// Refused IPv4 ranges: unspecified `0.0.0.0/8`, loopback `127.0.0.0/8`,
/// private `10.0.0.0/8`, `172.16.0.0/12` and `192.168.0.0/16`, link-local
/// `169.254.0.0/16`, shared (CGNAT) `100.64.0.0/10`, multicast
/// `224.0.0.0/4`, broadcast `255.255.255.255` and reserved `240.0.0.0/4`.
/// Refused IPv6 ranges: unspecified `::`, loopback `::1`, link-local
/// `fe80::/10`, site-local `fec0::/10` (deprecated), unique-local
/// `fc00::/7`, multicast `ff00::/8` and Teredo `2001::/32` (its server and
/// client addresses cannot be judged). An IPv6 address that embeds an IPv4
/// one is judged as that IPv4 address: IPv4-mapped `::ffff:a.b.c.d`,
/// IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::/96`, local-use NAT64
/// `64:ff9b:1::/48` in its `/96` form `64:ff9b:1::a.b.c.d` (any other form
/// of that prefix is refused outright: where its IPv4 sits depends on the
/// translator's prefix length, RFC 6052) and 6to4 `2002::/16` (bits 16–48).
///
/// The answer is a phrase naming the range (`"loopback (127.0.0.0/8)"`).
pub fn forbidden_address(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, _, _] = ip.octets();
    Some(match (a, b) {
        (0, _) => "unspecified (0.0.0.0/8)",
        (127, _) => "loopback (127.0.0.0/8)",
        (10, _) => "private (10.0.0.0/8)",
        (172, 16..=31) => "private (172.16.0.0/12)",
        (192, 168) => "private (192.168.0.0/16)",
        (169, 254) => "link-local (169.254.0.0/16)",
        (100, 64..=127) => "shared address space (CGNAT, 100.64.0.0/10)",
        (224..=239, _) => "multicast (224.0.0.0/4)",
        _ if ip.is_broadcast() => "broadcast (255.255.255.255)",
        (240..=255, _) => "reserved (240.0.0.0/4)",
        _ => return None,
    })
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    let o = ip.octets();
    let v4 = |at: usize| Ipv4Addr::new(o[at], o[at + 1], o[at + 2], o[at + 3]);
    if ip.is_unspecified() {
        return Some("unspecified (::)");
    }
    if ip.is_loopback() {
        return Some("loopback (::1)");
    }
    match s {
        // IPv4-mapped ::ffff:a.b.c.d and IPv4-compatible ::a.b.c.d.
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0, 0, 0, 0, 0, 0, _, _] => return forbidden_v4(v4(12)),
        // NAT64, the well-known prefix.
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => return forbidden_v4(v4(12)),
        // Local-use NAT64 with a /96 translator prefix; any other prefix
        // length puts the IPv4 elsewhere, so it cannot be judged.
        [0x64, 0xff9b, 1, 0, 0, 0, _, _] => return forbidden_v4(v4(12)),
        [0x64, 0xff9b, 1, ..] => return Some("local-use NAT64 (64:ff9b:1::/48) not in its /96 form"),
        // 6to4: 2002:aabb:ccdd::/48 embeds a.b.c.d.
        [0x2002, ..] => return forbidden_v4(v4(2)),
        [0x2001, 0, ..] => return Some("Teredo (2001::/32)"),
        _ => {}
    }
    Some(match s[0] {
        0xfe80..=0xfebf => "link-local (fe80::/10)",
        0xfec0..=0xfeff => "site-local (fec0::/10)",
        0xfc00..=0xfdff => "unique-local (fc00::/7)",
        0xff00..=0xffff => "multicast (ff00::/8)",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refused_range_is_named_and_public_addresses_pass() {
        let table: &[(&str, Option<&str>)] = &[
            // IPv4
            ("93.184.216.34", None),
            ("1.1.1.1", None),
            ("100.63.255.255", None),
            ("100.128.0.0", None),
            ("172.15.255.255", None),
            ("172.32.0.0", None),
            ("192.0.2.1", None),
            ("223.255.255.255", None),
            ("0.0.0.0", Some("unspecified")),
            ("0.1.2.3", Some("unspecified")),
            ("127.0.0.1", Some("loopback")),
            ("127.255.255.254", Some("loopback")),
            ("10.1.2.3", Some("private")),
            ("172.16.0.1", Some("private")),
            ("172.31.255.255", Some("private")),
            ("192.168.1.1", Some("private")),
            ("169.254.169.254", Some("link-local")),
            ("100.64.0.1", Some("CGNAT")),
            ("100.127.255.255", Some("CGNAT")),
            ("224.0.0.1", Some("multicast")),
            ("239.255.255.250", Some("multicast")),
            ("240.0.0.1", Some("reserved")),
            ("255.255.255.255", Some("broadcast")),
            // IPv6
            ("2606:4700::1", None),
            ("2a00:1450:4001::200e", None),
            ("::", Some("unspecified")),
            ("::1", Some("loopback")),
            ("fe80::1", Some("link-local")),
            ("febf::1", Some("link-local")),
            ("fec0::1", Some("site-local")),
            ("fc00::1", Some("unique-local")),
            ("fd12:3456::1", Some("unique-local")),
            ("ff02::1", Some("multicast")),
            ("2001::1", Some("Teredo")),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Some("Teredo")),
            // IPv6 forms embedding an IPv4, judged as the IPv4
            ("::ffff:127.0.0.1", Some("loopback")),
            ("::ffff:10.0.0.1", Some("private")),
            ("::ffff:169.254.169.254", Some("link-local")),
            ("::ffff:93.184.216.34", None),
            ("::127.0.0.1", Some("loopback")),
            ("::192.168.0.1", Some("private")),
            ("::0.0.0.2", Some("unspecified")),
            ("::93.184.216.34", None),
            ("64:ff9b::7f00:1", Some("loopback")),
            ("64:ff9b::a9fe:a9fe", Some("link-local")),
            ("64:ff9b::5db8:d822", None),
            ("64:ff9b:1::7f00:1", Some("loopback")),
            ("64:ff9b:1::c0a8:101", Some("private")),
            ("64:ff9b:1::5db8:d822", None),
            ("64:ff9b:1:7f00:1::", Some("NAT64")),
            ("64:ff9b:1:5db8:d8:2200::", Some("NAT64")),
            ("2002:7f00:1::1", Some("loopback")),
            ("2002:a00:1::", Some("private")),
            ("2002:a9fe:a9fe::1", Some("link-local")),
            ("2002:5db8:d822::1", None),
        ];
        for (address, want) in table {
            let ip: IpAddr = address.parse().unwrap();
            let got = forbidden_address(ip);
            match want {
                None => assert_eq!(got, None, "{address} should be allowed"),
                Some(word) => {
                    let reason = got.unwrap_or_else(|| panic!("{address} should be refused ({word})"));
                    assert!(reason.contains(word), "{address}: {reason} should name {word}");
                }
            }
        }
    }
}
