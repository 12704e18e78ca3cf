//! The addresses Slipway never connects to on a caller's behalf (DL-2),
//! unless `SLIPWAY_CALLBACK_ALLOW_PRIVATE` is set for development: one
//! table, [`BLOCKS`], read by every check of an outbound address (a delete's
//! callback host when the delete is accepted, the addresses its name
//! resolves to right before the push, and the hosts of
//! `SLIPWAY_NIX_ALLOWED_URIS`).
//!
//! The table holds every range of the IANA IPv4 and IPv6 Special-Purpose
//! Address Registries whose "Globally Reachable" column is `False` (or
//! `N/A`, for deprecated ranges), the multicast, site-local and
//! IPv4-compatible ranges those registries do not list, and the cloud
//! platforms' metadata and platform-service addresses. Where the registry
//! marks a single address inside a refused range as globally reachable
//! (`192.0.0.9` and `192.0.0.10`, the PCP and TURN anycast addresses;
//! `2001:1::1`–`2001:1::3`, `2001:3::/32` AMT, `2001:4:112::/48` AS112,
//! `2001:20::/28` ORCHIDv2 and `2001:30::/28` DETs inside `2001::/23`), the
//! whole range is still refused: they are anycast service addresses or
//! overlay identifiers that the nearest instance answers, often a box in the
//! operator's own network (a PCP anycast reaches the host's own NAT), and no
//! callback receiver lives there. For the same reason the AS112 and AMT
//! anycast prefixes (`192.31.196.0/24`, `192.52.193.0/24`,
//! `192.175.48.0/24`, `2620:4f:8000::/48`), which the registry marks
//! globally reachable, are refused too.
//!
//! Four IPv6 ranges embed an IPv4 address and are judged as that address
//! ([`Rule::Embedded`]): IPv4-mapped `::ffff:0:0/96` (a dual-stack socket
//! connects to the IPv4 address), IPv4-compatible `::/96` (deprecated),
//! NAT64 `64:ff9b::/96` and 6to4 `2002::/16` (bits 16–48).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What a row of [`BLOCKS`] decides for the addresses of its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Every address of the range is refused.
    Refuse,
    /// An IPv6 range that embeds an IPv4 address in the four bytes from
    /// this offset (0–12): the address is judged as that IPv4 address.
    Embedded(usize),
}

/// One row of [`BLOCKS`]: a range (an address and a prefix length), what
/// it is, where that is written, and what is decided for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// The range's first address.
    pub network: IpAddr,
    /// The prefix length, in bits (0–32 for IPv4, 0–128 for IPv6).
    pub prefix: u8,
    /// What the range is, as a phrase (`"benchmarking"`).
    pub name: &'static str,
    /// Where it is defined (`"IANA IPv4 Special-Purpose Address Registry, RFC 2544"`).
    pub source: &'static str,
    /// Refused, or judged by the IPv4 address it embeds.
    pub rule: Rule,
}

impl Block {
    const fn v4(a: [u8; 4], prefix: u8, name: &'static str, source: &'static str) -> Self {
        Self { network: IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])), prefix, name, source, rule: Rule::Refuse }
    }

    const fn v6(s: [u16; 8], prefix: u8, name: &'static str, source: &'static str) -> Self {
        Self {
            network: IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])),
            prefix,
            name,
            source,
            rule: Rule::Refuse,
        }
    }

    const fn embedded(self, at: usize) -> Self {
        Self { rule: Rule::Embedded(at), ..self }
    }

    /// The range's first address.
    pub fn first(&self) -> IpAddr {
        self.network
    }

    /// The range's last address.
    pub fn last(&self) -> IpAddr {
        match self.network {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) | host_mask32(self.prefix))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) | host_mask128(self.prefix))),
        }
    }

    /// Whether `ip` is in the range (an IPv4 address is never in an IPv6
    /// range, nor the other way round).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => u32::from(a) & !host_mask32(self.prefix) == u32::from(n),
            (IpAddr::V6(n), IpAddr::V6(a)) => u128::from(a) & !host_mask128(self.prefix) == u128::from(n),
            _ => false,
        }
    }
}

impl std::fmt::Display for Block {
    /// `benchmarking (198.18.0.0/15)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}/{})", self.name, self.network, self.prefix)
    }
}

fn host_mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shr(u32::from(prefix)).unwrap_or(0)
}

fn host_mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shr(u32::from(prefix)).unwrap_or(0)
}

/// Every range Slipway refuses to connect to on a caller's behalf, and the
/// IPv6 ranges judged by the IPv4 address they embed (see the module's
/// documentation for what is in it and why). An address is judged by the
/// longest range that holds it, so a metadata address is named as such
/// inside its link-local or private range.
pub const BLOCKS: &[Block] = &[
    // IPv4 Special-Purpose Address Registry, "Globally Reachable" False or N/A.
    Block::v4([0, 0, 0, 0], 8, "this network", "IANA IPv4 Special-Purpose Address Registry, RFC 791"),
    Block::v4(
        [0, 0, 0, 0],
        32,
        "this host on this network (unspecified)",
        "IANA IPv4 Special-Purpose Address Registry, RFC 1122",
    ),
    Block::v4([10, 0, 0, 0], 8, "private-use", "IANA IPv4 Special-Purpose Address Registry, RFC 1918"),
    Block::v4(
        [100, 64, 0, 0],
        10,
        "shared address space (CGNAT)",
        "IANA IPv4 Special-Purpose Address Registry, RFC 6598",
    ),
    Block::v4([127, 0, 0, 0], 8, "loopback", "IANA IPv4 Special-Purpose Address Registry, RFC 1122"),
    Block::v4([169, 254, 0, 0], 16, "link-local", "IANA IPv4 Special-Purpose Address Registry, RFC 3927"),
    Block::v4([172, 16, 0, 0], 12, "private-use", "IANA IPv4 Special-Purpose Address Registry, RFC 1918"),
    Block::v4(
        [192, 0, 0, 0],
        24,
        "IETF protocol assignments (including the PCP and TURN anycast addresses 192.0.0.9 and 192.0.0.10)",
        "IANA IPv4 Special-Purpose Address Registry, RFC 6890, RFC 7723, RFC 8155",
    ),
    Block::v4(
        [192, 0, 0, 0],
        29,
        "IPv4 service continuity prefix",
        "IANA IPv4 Special-Purpose Address Registry, RFC 7335",
    ),
    Block::v4([192, 0, 0, 8], 32, "IPv4 dummy address", "IANA IPv4 Special-Purpose Address Registry, RFC 7600"),
    Block::v4([192, 0, 0, 170], 31, "NAT64/DNS64 discovery", "IANA IPv4 Special-Purpose Address Registry, RFC 7050"),
    Block::v4([192, 0, 2, 0], 24, "documentation (TEST-NET-1)", "IANA IPv4 Special-Purpose Address Registry, RFC 5737"),
    Block::v4(
        [192, 31, 196, 0],
        24,
        "AS112 anycast (AS112-v4)",
        "IANA IPv4 Special-Purpose Address Registry, RFC 7535",
    ),
    Block::v4([192, 52, 193, 0], 24, "AMT anycast", "IANA IPv4 Special-Purpose Address Registry, RFC 7450"),
    Block::v4(
        [192, 88, 99, 0],
        24,
        "6to4 relay anycast (deprecated)",
        "IANA IPv4 Special-Purpose Address Registry, RFC 7526",
    ),
    Block::v4([192, 168, 0, 0], 16, "private-use", "IANA IPv4 Special-Purpose Address Registry, RFC 1918"),
    Block::v4(
        [192, 175, 48, 0],
        24,
        "AS112 anycast (direct delegation)",
        "IANA IPv4 Special-Purpose Address Registry, RFC 7534",
    ),
    Block::v4([198, 18, 0, 0], 15, "benchmarking", "IANA IPv4 Special-Purpose Address Registry, RFC 2544"),
    Block::v4(
        [198, 51, 100, 0],
        24,
        "documentation (TEST-NET-2)",
        "IANA IPv4 Special-Purpose Address Registry, RFC 5737",
    ),
    Block::v4(
        [203, 0, 113, 0],
        24,
        "documentation (TEST-NET-3)",
        "IANA IPv4 Special-Purpose Address Registry, RFC 5737",
    ),
    Block::v4([240, 0, 0, 0], 4, "reserved", "IANA IPv4 Special-Purpose Address Registry, RFC 1112"),
    Block::v4([255, 255, 255, 255], 32, "limited broadcast", "IANA IPv4 Special-Purpose Address Registry, RFC 919"),
    // Not in the special-purpose registry, never a unicast receiver.
    Block::v4([224, 0, 0, 0], 4, "multicast", "IANA IPv4 Multicast Address Space Registry, RFC 5771"),
    // Cloud platforms' metadata and platform services.
    Block::v4(
        [169, 254, 169, 254],
        32,
        "cloud instance metadata (AWS, Google Cloud, Azure, OpenStack, Oracle, DigitalOcean)",
        "AWS EC2 IMDS, Google Compute metadata server, Azure IMDS documentation",
    ),
    Block::v4([169, 254, 169, 253], 32, "cloud DNS resolver (AWS Route 53 Resolver)", "AWS VPC DNS documentation"),
    Block::v4(
        [169, 254, 170, 2],
        32,
        "container credentials and task metadata (AWS ECS)",
        "AWS ECS task metadata endpoint documentation",
    ),
    Block::v4(
        [169, 254, 170, 23],
        32,
        "pod credentials (AWS EKS Pod Identity agent)",
        "AWS EKS Pod Identity documentation",
    ),
    Block::v4(
        [169, 254, 0, 23],
        32,
        "cloud instance metadata (Tencent Cloud)",
        "Tencent Cloud CVM instance metadata documentation",
    ),
    Block::v4(
        [168, 63, 129, 16],
        32,
        "cloud platform wire server, DNS and health probes (Azure)",
        "Azure documentation: what is IP address 168.63.129.16",
    ),
    Block::v4(
        [100, 100, 100, 200],
        32,
        "cloud instance metadata (Alibaba Cloud)",
        "Alibaba Cloud ECS instance metadata documentation",
    ),
    Block::v4(
        [192, 0, 0, 192],
        32,
        "cloud instance metadata, legacy address (Oracle Cloud)",
        "Oracle Cloud Infrastructure instance metadata documentation",
    ),
    // IPv6 Special-Purpose Address Registry, "Globally Reachable" False or N/A.
    Block::v6([0, 0, 0, 0, 0, 0, 0, 1], 128, "loopback", "IANA IPv6 Special-Purpose Address Registry, RFC 4291"),
    Block::v6([0, 0, 0, 0, 0, 0, 0, 0], 128, "unspecified", "IANA IPv6 Special-Purpose Address Registry, RFC 4291"),
    Block::v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96, "IPv4-mapped", "IANA IPv6 Special-Purpose Address Registry, RFC 4291")
        .embedded(12),
    Block::v6([0, 0, 0, 0, 0, 0, 0, 0], 96, "IPv4-compatible (deprecated)", "RFC 4291 §2.5.5.1").embedded(12),
    Block::v6(
        [0x64, 0xff9b, 0, 0, 0, 0, 0, 0],
        96,
        "NAT64 well-known prefix",
        "IANA IPv6 Special-Purpose Address Registry, RFC 6052",
    )
    .embedded(12),
    Block::v6(
        [0x64, 0xff9b, 1, 0, 0, 0, 0, 0],
        48,
        "local-use IPv4/IPv6 translation",
        "IANA IPv6 Special-Purpose Address Registry, RFC 8215",
    ),
    Block::v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64, "discard-only", "IANA IPv6 Special-Purpose Address Registry, RFC 6666"),
    Block::v6(
        [0x100, 0, 0, 1, 0, 0, 0, 0],
        64,
        "dummy IPv6 prefix",
        "IANA IPv6 Special-Purpose Address Registry, RFC 9780",
    ),
    Block::v6(
        [0x2001, 0, 0, 0, 0, 0, 0, 0],
        23,
        "IETF protocol assignments (including the anycast, AMT, AS112, ORCHIDv2 and DET ranges)",
        "IANA IPv6 Special-Purpose Address Registry, RFC 2928",
    ),
    Block::v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, "Teredo", "IANA IPv6 Special-Purpose Address Registry, RFC 4380"),
    Block::v6(
        [0x2001, 2, 0, 0, 0, 0, 0, 0],
        48,
        "benchmarking",
        "IANA IPv6 Special-Purpose Address Registry, RFC 5180",
    ),
    Block::v6(
        [0x2001, 0x10, 0, 0, 0, 0, 0, 0],
        28,
        "ORCHID (deprecated)",
        "IANA IPv6 Special-Purpose Address Registry, RFC 4843",
    ),
    Block::v6(
        [0x2001, 0xdb8, 0, 0, 0, 0, 0, 0],
        32,
        "documentation",
        "IANA IPv6 Special-Purpose Address Registry, RFC 3849",
    ),
    Block::v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, "6to4", "IANA IPv6 Special-Purpose Address Registry, RFC 3056")
        .embedded(2),
    Block::v6(
        [0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0],
        48,
        "AS112 anycast (direct delegation)",
        "IANA IPv6 Special-Purpose Address Registry, RFC 7534",
    ),
    Block::v6(
        [0x3fff, 0, 0, 0, 0, 0, 0, 0],
        20,
        "documentation",
        "IANA IPv6 Special-Purpose Address Registry, RFC 9637",
    ),
    Block::v6(
        [0x5f00, 0, 0, 0, 0, 0, 0, 0],
        16,
        "segment routing (SRv6) SIDs",
        "IANA IPv6 Special-Purpose Address Registry, RFC 9602",
    ),
    Block::v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, "unique-local", "IANA IPv6 Special-Purpose Address Registry, RFC 4193"),
    Block::v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "link-local", "IANA IPv6 Special-Purpose Address Registry, RFC 4291"),
    // Not in the special-purpose registry, never a receiver.
    Block::v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, "site-local (deprecated)", "RFC 3879"),
    Block::v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "multicast", "IANA IPv6 Multicast Address Space Registry, RFC 4291"),
    // Cloud platforms' metadata and platform services.
    Block::v6(
        [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254],
        128,
        "cloud instance metadata (AWS, IPv6)",
        "AWS EC2 IMDS documentation",
    ),
    Block::v6(
        [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x253],
        128,
        "cloud DNS resolver (AWS Route 53 Resolver, IPv6)",
        "AWS VPC DNS documentation",
    ),
    Block::v6(
        [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23],
        128,
        "pod credentials (AWS EKS Pod Identity agent, IPv6)",
        "AWS EKS Pod Identity documentation",
    ),
];

/// The row of [`BLOCKS`] that decides `ip`: the longest range holding it.
pub fn block_of(ip: IpAddr) -> Option<&'static Block> {
    BLOCKS.iter().filter(|b| b.contains(ip)).max_by_key(|b| b.prefix)
}

/// The row of [`BLOCKS`] that refuses `ip`, or `None` for an address a
/// push may connect to: an address in a [`Rule::Refuse`] range, or one in
/// a [`Rule::Embedded`] range whose embedded IPv4 address is refused.
pub fn refusing_block(ip: IpAddr) -> Option<&'static Block> {
    let block = block_of(ip)?;
    match (block.rule, ip) {
        (Rule::Refuse, _) => Some(block),
        (Rule::Embedded(at), IpAddr::V6(v6)) => {
            let o = v6.octets();
            refusing_block(IpAddr::V4(Ipv4Addr::new(o[at], o[at + 1], o[at + 2], o[at + 3])))
        }
        (Rule::Embedded(_), IpAddr::V4(_)) => Some(block),
    }
}

/// Why a push must not connect to `ip`, or `None` for an address it may
/// connect to (DL-2: a callback URL must not reach the api's own host, its
/// networks or its cloud platform): the row of [`BLOCKS`] that refuses it,
/// as a phrase naming the range (`"benchmarking (198.18.0.0/15)"`). An IPv6
/// address embedding an IPv4 one is named by the IPv4 range.
pub fn forbidden_address(ip: IpAddr) -> Option<String> {
    refusing_block(ip).map(Block::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(ip: IpAddr, delta: i128) -> Option<IpAddr> {
        match ip {
            IpAddr::V4(a) => {
                let n = i128::from(u32::from(a)) + delta;
                u32::try_from(n).ok().map(|n| IpAddr::V4(n.into()))
            }
            IpAddr::V6(a) => {
                let n = u128::from(a).checked_add_signed(delta)?;
                Some(IpAddr::V6(n.into()))
            }
        }
    }

    fn middle(b: &Block) -> IpAddr {
        match (b.first(), b.last()) {
            (IpAddr::V4(f), IpAddr::V4(l)) => IpAddr::V4((u32::from(f) + (u32::from(l) - u32::from(f)) / 2).into()),
            (IpAddr::V6(f), IpAddr::V6(l)) => IpAddr::V6((u128::from(f) + (u128::from(l) - u128::from(f)) / 2).into()),
            _ => unreachable!(),
        }
    }

    #[test]
    fn every_refusing_row_refuses_its_first_middle_and_last_address_and_its_uncovered_neighbours_pass() {
        for b in BLOCKS.iter().filter(|b| b.rule == Rule::Refuse) {
            for ip in [b.first(), middle(b), b.last()] {
                let by = refusing_block(ip).unwrap_or_else(|| panic!("{ip} of {b} is allowed"));
                assert!(by.prefix >= b.prefix, "{ip} of {b} is decided by the wider {by}");
            }
            for ip in [add(b.first(), -1), add(b.last(), 1)].into_iter().flatten() {
                if block_of(ip).is_none() {
                    assert_eq!(forbidden_address(ip), None, "{ip}, next to {b}");
                }
            }
        }
    }

    #[test]
    fn every_row_names_itself_and_its_source_and_its_network_is_the_first_address() {
        for b in BLOCKS {
            assert!(!b.name.is_empty() && !b.source.is_empty(), "{b:?}");
            let bits = if b.network.is_ipv4() { 32 } else { 128 };
            assert!(b.prefix <= bits, "{b:?}");
            assert!(b.contains(b.network) && b.contains(b.last()), "{b:?}");
            assert_eq!(add(b.network, -1).filter(|ip| b.contains(*ip)), None, "{b:?} does not start at its network");
        }
    }

    #[test]
    fn the_embedding_ranges_are_judged_by_their_ipv4_address() {
        let table: &[(&str, Option<&str>)] = &[
            ("::ffff:127.0.0.1", Some("loopback")),
            ("::ffff:10.0.0.1", Some("private-use")),
            ("::ffff:169.254.169.254", Some("metadata")),
            ("::ffff:198.18.0.1", Some("benchmarking")),
            ("::ffff:93.184.216.34", None),
            ("::127.0.0.1", Some("loopback")),
            ("::192.168.0.1", Some("private-use")),
            ("::0.0.0.2", Some("this network")),
            ("::93.184.216.34", None),
            ("::", Some("unspecified")),
            ("::1", Some("loopback")),
            ("64:ff9b::7f00:1", Some("loopback")),
            ("64:ff9b::a83f:8110", Some("Azure")),
            ("64:ff9b::5db8:d822", None),
            ("2002:7f00:1::1", Some("loopback")),
            ("2002:a00:1::", Some("private-use")),
            ("2002:a9fe:a9fe::1", Some("metadata")),
            ("2002:c612:1::1", Some("benchmarking")),
            ("2002:5db8:d822::1", None),
            // Refused whole, whatever they embed.
            ("64:ff9b:1::5db8:d822", Some("local-use")),
            ("2001::5db8:d822", Some("Teredo")),
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

    #[test]
    fn the_reported_inputs_and_public_addresses_are_judged() {
        let table: &[(&str, Option<&str>)] = &[
            ("198.18.0.1", Some("benchmarking (198.18.0.0/15)")),
            ("168.63.129.16", Some("Azure")),
            ("169.254.169.254", Some("metadata")),
            ("fd00:ec2::254", Some("metadata")),
            ("100.100.100.200", Some("Alibaba")),
            ("192.0.0.9", Some("IETF protocol assignments")),
            ("93.184.216.34", None),
            ("1.1.1.1", None),
            ("168.63.129.17", None),
            ("2606:4700::1", None),
            ("2a00:1450:4001::200e", None),
        ];
        for (address, want) in table {
            let got = forbidden_address(address.parse().unwrap());
            match want {
                None => assert_eq!(got, None, "{address} should be allowed"),
                Some(word) => assert!(got.as_deref().is_some_and(|r| r.contains(word)), "{address}: {got:?}"),
            }
        }
    }
}
