//! Which addresses a push may reach (docs/architecture.md, "Push delivery"): the guard against
//! server-side request forgery. A push target's URL is written by a client of the admin API,
//! so by default a push goes only to the public internet, never to the node's own loopback,
//! its private networks, link-local addresses (cloud metadata at 169.254.169.254), or any
//! other special-purpose range, including IPv6 forms that embed such an IPv4 address
//! (`::ffff:127.0.0.1`, NAT64 `64:ff9b::10.0.0.1`, 6to4).
//!
//! The node's `REBOUND_PUSH_ALLOW` (comma-separated) permits more: host names (exact,
//! case-insensitive: `localhost`, `receiver.internal`) and addresses or networks (`127.0.0.1`,
//! `10.0.0.0/8`, `::1`, `fd00::/8`).
//!
//! [`resolve`] looks a host up once and returns the addresses the request may connect to; the
//! client connects to exactly those, so a DNS answer that changes between check and connect
//! (DNS rebinding) cannot slip an address past the guard. If any address of the answer is
//! refused, the whole host is: a name that resolves to both a public and a private address is
//! not one a push should reach.

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
};

/// The configuration key, named in messages so an operator knows what to change.
const KEY: &str = "REBOUND_PUSH_ALLOW";

/// What `REBOUND_PUSH_ALLOW` permits beyond the public internet.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allow {
    /// Lower case, without a trailing dot.
    hosts: Vec<String>,
    networks: Vec<Net>,
}

impl Allow {
    /// Parses REBOUND_PUSH_ALLOW's value: comma-separated entries, each a host name, an IP
    /// address (an IPv6 one with or without brackets) or a network in CIDR form; blanks around
    /// entries and empty entries are ignored. Err names the offending entry
    /// (`REBOUND_PUSH_ALLOW: entry 2 "10.0.0.0/33": prefix length over 32`).
    pub fn parse(s: &str) -> Result<Allow, String> {
        let mut allow = Allow::default();
        for (i, raw) in s.split(',').enumerate() {
            let entry = raw.trim();
            if entry.is_empty() {
                continue;
            }
            let bad = |why: String| format!("{KEY}: entry {} {entry:?}: {why}", i + 1);
            if entry.contains('/') {
                allow.networks.push(Net::parse(entry).map_err(bad)?);
            } else if let Some(ip) = ip_literal(entry) {
                allow.networks.push(Net::host(ip));
            } else if entry.contains(':') || entry.starts_with('[') {
                return Err(bad("not an IP address".into()));
            } else {
                allow.hosts.push(host_name(entry).map_err(bad)?);
            }
        }
        Ok(allow)
    }

    /// True when `host` (as written in the URL) is named, or `ip` lies in a named network (an
    /// IPv4-mapped IPv6 address also counts as its IPv4 address).
    pub fn permits(&self, host: &str, ip: IpAddr) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host);
        if self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
            return true;
        }
        let mapped = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        self.networks
            .iter()
            .any(|n| n.contains(ip) || mapped.is_some_and(|m| n.contains(m)))
    }

    /// True when nothing is permitted beyond the public internet.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty() && self.networks.is_empty()
    }
}

/// The canonical form of the value: `Allow::parse` of it gives the same `Allow`.
impl fmt::Display for Allow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut sep = |f: &mut fmt::Formatter<'_>| {
            let s = if first { "" } else { "," };
            first = false;
            f.write_str(s)
        };
        for h in &self.hosts {
            sep(f)?;
            f.write_str(h)?;
        }
        for n in &self.networks {
            sep(f)?;
            write!(f, "{n}")?;
        }
        Ok(())
    }
}

/// An IP network: an address whose bits past `prefix` are zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Net {
    addr: IpAddr,
    prefix: u8,
}

impl Net {
    /// The network of one address.
    fn host(addr: IpAddr) -> Net {
        let prefix = match addr {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        Net { addr, prefix }
    }

    /// `address/prefix`; the address may be a bracketed IPv6 one; host bits must be zero.
    fn parse(s: &str) -> Result<Net, String> {
        let Some((addr, prefix)) = s.split_once('/') else {
            return Err("no prefix length (address/length)".into());
        };
        let addr = ip_literal(addr).ok_or_else(|| format!("{addr:?} is not an IP address"))?;
        let max: u8 = match addr {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("prefix length {prefix:?} is not a number"));
        }
        // At most 3 significant digits fit below the check; more are over any maximum.
        let digits = prefix.trim_start_matches('0');
        let prefix = match digits.parse::<u8>() {
            Ok(p) if p <= max => p,
            _ if digits.is_empty() => 0,
            _ => return Err(format!("prefix length over {max}")),
        };
        let net = Net { addr, prefix };
        let masked = net.network();
        if masked != addr {
            return Err(format!("host bits set (the network is {masked}/{prefix})"));
        }
        Ok(net)
    }

    /// The address with the bits past the prefix cleared.
    fn network(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask32(self.prefix))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask128(self.prefix))),
        }
    }

    fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(i)) => {
                (u32::from(n) ^ u32::from(i)) & mask32(self.prefix) == 0
            }
            (IpAddr::V6(n), IpAddr::V6(i)) => {
                (u128::from(n) ^ u128::from(i)) & mask128(self.prefix) == 0
            }
            _ => false,
        }
    }
}

impl fmt::Display for Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn mask32(prefix: u8) -> u32 {
    u32::MAX
        .checked_shl(32u32.saturating_sub(u32::from(prefix)))
        .unwrap_or(0)
}

fn mask128(prefix: u8) -> u128 {
    u128::MAX
        .checked_shl(128u32.saturating_sub(u32::from(prefix)))
        .unwrap_or(0)
}

/// An IP address as written in a URL or in the allow list: IPv6 with or without brackets.
fn ip_literal(s: &str) -> Option<IpAddr> {
    let inner = s
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(s);
    inner.parse().ok()
}

/// A DNS name, lower-cased and without its trailing dot: labels of 1-63 letters, digits,
/// `-` and `_`, 253 characters at most, not ending in a numeric label (that would be a
/// mistyped address).
fn host_name(s: &str) -> Result<String, String> {
    let name = s.strip_suffix('.').unwrap_or(s);
    if name.is_empty() || name.len() > 253 {
        return Err("not a host name (1-253 characters)".into());
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err("not a host name (a label is empty or over 63 characters)".into());
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(
                "not a host name (letters, digits, '-' and '_' between dots), address or network"
                    .into(),
            );
        }
    }
    if name
        .rsplit('.')
        .next()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err("not an IP address, and a host name cannot end in a number".into());
    }
    Ok(name.to_ascii_lowercase())
}

/// True for an address on the public internet: none of the special-purpose ranges (see
/// [`refusal`]).
pub fn is_public(ip: IpAddr) -> bool {
    refusal(ip).is_none()
}

/// Why `ip` is not on the public internet (None: it is).
///
/// IPv6 is public only inside global unicast 2000::/3, less its documentation, IETF-protocol
/// (Teredo among them) ranges; 6to4 (2002::/16), NAT64 (64:ff9b::/96) and IPv4-mapped
/// (::ffff:0:0/96) addresses are judged by the IPv4 address they carry; IPv4-compatible
/// ones (::/96, deprecated) are refused.
pub fn refusal(ip: IpAddr) -> Option<String> {
    match ip {
        IpAddr::V4(v4) => v4_refusal(v4).map(str::to_owned),
        IpAddr::V6(v6) => v6_refusal(v6),
    }
}

fn v4_refusal(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, d] = ip.octets();
    Some(match (a, b, c, d) {
        (0, 0, 0, 0) => "the unspecified address",
        (0, ..) => "\"this network\", 0.0.0.0/8",
        (10, ..) => "private, 10.0.0.0/8",
        (100, 64..=127, ..) => "shared address space (carrier-grade NAT), 100.64.0.0/10",
        (127, ..) => "loopback, 127.0.0.0/8",
        (169, 254, ..) => "link-local (cloud metadata services), 169.254.0.0/16",
        (172, 16..=31, ..) => "private, 172.16.0.0/12",
        (192, 0, 0, _) => "IETF protocol assignments, 192.0.0.0/24",
        (192, 0, 2, _) => "documentation, 192.0.2.0/24",
        (192, 88, 99, _) => "6to4 relay anycast, 192.88.99.0/24",
        (192, 168, ..) => "private, 192.168.0.0/16",
        (198, 18..=19, ..) => "benchmarking, 198.18.0.0/15",
        (198, 51, 100, _) => "documentation, 198.51.100.0/24",
        (203, 0, 113, _) => "documentation, 203.0.113.0/24",
        (224..=239, ..) => "multicast, 224.0.0.0/4",
        (255, 255, 255, 255) => "broadcast",
        (240..=255, ..) => "reserved, 240.0.0.0/4",
        _ => return None,
    })
}

fn v6_refusal(ip: Ipv6Addr) -> Option<String> {
    let s = ip.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    let carried = |form: &str, v4: Ipv4Addr| {
        v4_refusal(v4).map(|why| format!("{form} form of {v4}, which is {why}"))
    };
    let fixed = |why: &str| Some(why.to_owned());
    if ip.is_unspecified() {
        return fixed("the unspecified address");
    }
    if ip.is_loopback() {
        return fixed("loopback, ::1");
    }
    if s[..5] == [0; 5] && s[5] == 0xffff {
        return carried("the IPv4-mapped", embedded(s[6], s[7]));
    }
    if s[..6] == [0; 6] {
        return fixed("IPv4-compatible (deprecated), ::/96");
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return carried("the NAT64", embedded(s[6], s[7]));
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
        return fixed("local-use NAT64, 64:ff9b:1::/48");
    }
    if s[0] & 0xe000 != 0x2000 {
        return fixed(match s[0] {
            0xfc00..=0xfdff => "unique local, fc00::/7",
            0xfe80..=0xfebf => "link-local, fe80::/10",
            0xfec0..=0xfeff => "site-local (deprecated), fec0::/10",
            0xff00..=0xffff => "multicast, ff00::/8",
            0x0100 if s[1..4] == [0; 3] => "discard-only, 100::/64",
            _ => "not global unicast (outside 2000::/3)",
        });
    }
    match (s[0], s[1]) {
        (0x2001, 0x0db8) => fixed("documentation, 2001:db8::/32"),
        (0x2001, 0..=0x01ff) => fixed("IETF protocol assignments (Teredo among them), 2001::/23"),
        (0x2002, _) => carried("the 6to4", embedded(s[1], s[2])),
        (0x3fff, 0..=0x0fff) => fixed("documentation, 3fff::/20"),
        _ => None,
    }
}

/// A push the guard refuses: the message names the host, the address and why, and says that
/// `REBOUND_PUSH_ALLOW` can permit it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Why [`resolve`] gave no addresses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// An address is not public and not permitted.
    #[error("{0}")]
    Refused(Refused),
    /// The name could not be resolved (it may resolve later).
    #[error("{0}")]
    Dns(String),
}

/// Resolves `host:port` (an IP literal, with or without brackets for IPv6, is not looked up)
/// and returns its addresses, each public or permitted by `allow`, in the resolver's order
/// without repeats. Err(Refused) when any address is neither: a host is reached at all of its
/// addresses or not at all.
pub async fn resolve(
    host: &str,
    port: u16,
    allow: &Allow,
) -> Result<Vec<SocketAddr>, ResolveError> {
    resolve_with(host, port, allow, system_lookup).await
}

/// The system resolver's answer for `host:port` (tokio runs it on its blocking pool, so it
/// never blocks the runtime).
pub async fn system_lookup(host: String, port: u16) -> std::io::Result<Vec<SocketAddr>> {
    Ok(tokio::net::lookup_host((host.as_str(), port))
        .await?
        .collect())
}

/// [`resolve`] with the look-up of a host name given (`lookup(host, port)`; not called for an
/// IP literal): the system resolver ([`system_lookup`]) or, in tests, a fixed answer.
pub async fn resolve_with<F, Fut>(
    host: &str,
    port: u16,
    allow: &Allow,
    lookup: F,
) -> Result<Vec<SocketAddr>, ResolveError>
where
    F: FnOnce(String, u16) -> Fut,
    Fut: std::future::Future<Output = std::io::Result<Vec<SocketAddr>>>,
{
    let found: Vec<SocketAddr> = match ip_literal(host) {
        Some(ip) => vec![SocketAddr::new(ip, port)],
        None if host.is_empty() => return Err(ResolveError::Dns("no host to resolve".into())),
        None => lookup(host.to_string(), port)
            .await
            .map_err(|e| ResolveError::Dns(format!("cannot resolve {host:?}: {e}")))?,
    };
    let mut addrs: Vec<SocketAddr> = Vec::with_capacity(found.len());
    for a in found {
        if !addrs.contains(&a) {
            addrs.push(a);
        }
    }
    if addrs.is_empty() {
        return Err(ResolveError::Dns(format!(
            "{host:?} resolves to no address"
        )));
    }
    for a in &addrs {
        let ip = a.ip();
        if let Some(why) = refusal(ip) {
            if !allow.permits(host, ip) {
                return Err(ResolveError::Refused(Refused(format!(
                    "push to {host} refused: address {ip} is {why}; {KEY} can permit the host \
                     or a network holding the address"
                ))));
            }
        }
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect(s)
    }

    const REFUSED: &[&str] = &[
        "127.0.0.1",
        "127.255.0.9",
        "169.254.169.254",
        "10.0.0.1",
        "192.168.1.1",
        "172.16.0.1",
        "172.31.255.255",
        "100.64.0.1",
        "100.127.255.254",
        "0.0.0.0",
        "0.1.2.3",
        "255.255.255.255",
        "240.0.0.1",
        "224.0.0.251",
        "192.0.2.10",
        "198.51.100.7",
        "203.0.113.1",
        "198.18.0.1",
        "192.0.0.8",
        "::",
        "::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "::ffff:10.1.2.3",
        "::127.0.0.1",
        "::8.8.8.8",
        "64:ff9b::10.0.0.1",
        "64:ff9b::127.0.0.1",
        "64:ff9b:1::1",
        "2002:c0a8:0101::1",
        "2002:7f00:1::",
        "fd12::1",
        "fc00::1",
        "fe80::1",
        "fec0::1",
        "ff02::1",
        "100::1",
        "2001:db8::1",
        "2001::1",
        "3fff::1",
        "5f00::1",
        "::ffff:0:127.0.0.1",
    ];

    const PUBLIC: &[&str] = &[
        "8.8.8.8",
        "1.1.1.1",
        "93.184.216.34",
        "100.63.255.255",
        "100.128.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "169.253.1.1",
        "192.0.3.1",
        "223.255.255.255",
        "2606:4700::1",
        "2a00:1450:4001:82a::200e",
        "::ffff:8.8.8.8",
        "64:ff9b::8.8.8.8",
        "2002:0808:0808::1",
        "2001:4860:4860::8888",
        "3ffe::1",
    ];

    #[test]
    fn special_ranges_are_refused() {
        for s in REFUSED {
            assert!(!is_public(ip(s)), "{s} is public");
            assert!(refusal(ip(s)).is_some_and(|w| !w.is_empty()), "{s}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for s in PUBLIC {
            assert_eq!(refusal(ip(s)), None, "{s}");
            assert!(is_public(ip(s)), "{s}");
        }
    }

    #[test]
    fn parse_accepts_hosts_addresses_and_networks() {
        let a = Allow::parse(
            " localhost , Receiver.Internal.,127.0.0.1, 10.0.0.0/8,::1,[fd00::]/8, [::2],,",
        )
        .expect("valid");
        assert_eq!(
            a.to_string(),
            "localhost,receiver.internal,127.0.0.1/32,10.0.0.0/8,::1/128,fd00::/8,::2/128"
        );
        assert_eq!(Allow::parse(&a.to_string()), Ok(a));
        assert_eq!(Allow::parse(""), Ok(Allow::default()));
        assert_eq!(Allow::parse(" , "), Ok(Allow::default()));
        assert!(Allow::default().is_empty());
    }

    #[test]
    fn parse_names_the_offending_entry() {
        for (value, message) in [
            (
                "localhost,10.0.0.0/33",
                "REBOUND_PUSH_ALLOW: entry 2 \"10.0.0.0/33\": prefix length over 32",
            ),
            (
                "fd00::/129",
                "REBOUND_PUSH_ALLOW: entry 1 \"fd00::/129\": prefix length over 128",
            ),
            (
                "10.0.0.1/8",
                "REBOUND_PUSH_ALLOW: entry 1 \"10.0.0.1/8\": host bits set (the network is 10.0.0.0/8)",
            ),
            (
                "a,,10.0.0.0/x",
                "REBOUND_PUSH_ALLOW: entry 3 \"10.0.0.0/x\": prefix length \"x\" is not a number",
            ),
        ] {
            assert_eq!(Allow::parse(value), Err(message.to_string()), "{value}");
        }
        for value in [
            "10.0.0.300",
            "10.0.0.0/",
            "/8",
            "10.0.0.0/+8",
            "10.0.0.0/8/8",
            "10.0.0.0/-1",
            "10.0.0.0/99999999999999999999",
            "fd00:::1",
            "[::1",
            "bad host",
            "under_score..x",
            "exa mple.com",
            "1.2.3",
            "*.example.com",
            "http://example.com",
        ] {
            let e = Allow::parse(value).expect_err(value);
            assert!(e.starts_with("REBOUND_PUSH_ALLOW: entry 1 "), "{e}");
        }
        assert_eq!(
            Allow::parse("10.0.0.0/008").map(|a| a.to_string()),
            Ok("10.0.0.0/8".into())
        );
        assert_eq!(
            Allow::parse("0.0.0.0/0").map(|a| a.to_string()),
            Ok("0.0.0.0/0".into())
        );
    }

    #[test]
    fn permits_named_hosts_and_networks() {
        let a = Allow::parse("localhost,receiver.internal,10.0.0.0/8,::1,fd00::/8").expect("ok");
        assert!(a.permits("localhost", ip("127.0.0.1")));
        assert!(a.permits("LocalHost.", ip("127.0.0.1")));
        assert!(a.permits("receiver.internal", ip("192.168.7.7")));
        assert!(!a.permits("other.internal", ip("192.168.7.7")));
        assert!(!a.permits("sub.receiver.internal", ip("192.168.7.7")));
        assert!(a.permits("x", ip("10.200.0.1")));
        assert!(a.permits("x", ip("::ffff:10.200.0.1")));
        assert!(!a.permits("x", ip("11.0.0.1")));
        assert!(a.permits("[::1]", ip("::1")));
        assert!(!a.permits("x", ip("::2")));
        assert!(a.permits("x", ip("fd12::1")));
        assert!(!a.permits("x", ip("fe80::1")));
        assert!(!Allow::default().permits("localhost", ip("127.0.0.1")));
    }

    fn refused(r: Result<Vec<SocketAddr>, ResolveError>) -> String {
        match r {
            Err(ResolveError::Refused(Refused(m))) => m,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[tokio::test]
    async fn literals_are_not_looked_up_and_are_guarded() {
        let none = Allow::default();
        for s in [
            "127.0.0.1",
            "[::1]",
            "::1",
            "[::ffff:127.0.0.1]",
            "169.254.169.254",
        ] {
            let m = refused(resolve(s, 80, &none).await);
            assert!(m.contains(s.trim_matches(['[', ']'])), "{m}");
            assert!(m.contains("REBOUND_PUSH_ALLOW"), "{m}");
        }
        let m = refused(resolve("127.0.0.1", 80, &none).await);
        assert_eq!(
            m,
            "push to 127.0.0.1 refused: address 127.0.0.1 is loopback, 127.0.0.0/8; \
             REBOUND_PUSH_ALLOW can permit the host or a network holding the address"
        );
        assert_eq!(
            resolve("8.8.8.8", 443, &none).await,
            Ok(vec!["8.8.8.8:443".parse().expect("addr")])
        );
        assert_eq!(
            resolve("[2606:4700::1]", 443, &none).await,
            Ok(vec!["[2606:4700::1]:443".parse().expect("addr")])
        );
        let loopback = Allow::parse("::1,127.0.0.1").expect("ok");
        assert_eq!(
            resolve("[::1]", 8080, &loopback).await,
            Ok(vec!["[::1]:8080".parse().expect("addr")])
        );
        assert!(matches!(
            resolve("", 80, &none).await,
            Err(ResolveError::Dns(_))
        ));
    }

    #[tokio::test]
    async fn localhost_is_refused_unless_allowed() {
        let m = refused(resolve("localhost", 8080, &Allow::default()).await);
        assert!(m.contains("localhost") && m.contains("loopback"), "{m}");

        let by_name = Allow::parse("localhost").expect("ok");
        let addrs = resolve("localhost", 8080, &by_name)
            .await
            .expect("permitted");
        assert!(!addrs.is_empty());
        assert!(addrs
            .iter()
            .all(|a| a.ip().is_loopback() && a.port() == 8080));

        // Permitted by network: every address localhost resolves to must be covered (some
        // resolvers give ::1 as well as 127.0.0.1).
        let by_net = Allow::parse("127.0.0.0/8,::1").expect("ok");
        assert_eq!(resolve("localhost", 8080, &by_net).await, Ok(addrs.clone()));
        let v4_only = Allow::parse("127.0.0.0/8").expect("ok");
        let r = resolve("localhost", 8080, &v4_only).await;
        if addrs.iter().all(|a| a.is_ipv4()) {
            assert_eq!(r, Ok(addrs));
        } else {
            assert!(refused(r).contains("::1"));
        }
    }

    #[tokio::test]
    async fn unresolvable_names_are_dns_errors() {
        // Fails inside the resolver call, without a query leaving the machine.
        let r = resolve("bad\0host", 80, &Allow::default()).await;
        assert!(matches!(r, Err(ResolveError::Dns(_))), "{r:?}");
    }

    fn any_ip() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            any::<u32>().prop_map(|n| IpAddr::V4(Ipv4Addr::from(n))),
            any::<u128>().prop_map(|n| IpAddr::V6(Ipv6Addr::from(n))),
        ]
    }

    fn any_net() -> impl Strategy<Value = Net> {
        (any_ip(), any::<u8>()).prop_map(|(addr, p)| {
            let prefix = match addr {
                IpAddr::V4(_) => p % 33,
                IpAddr::V6(_) => p % 129,
            };
            let n = Net { addr, prefix };
            Net {
                addr: n.network(),
                prefix,
            }
        })
    }

    /// Text made of the characters the parser cares about.
    fn allowish() -> impl Strategy<Value = String> {
        "[0-9a-fA-F.:/\\[\\], x_-]{0,40}"
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn parse_is_total(s in prop_oneof![any::<String>(), allowish()]) {
            match Allow::parse(&s) {
                Ok(a) => prop_assert_eq!(Allow::parse(&a.to_string()), Ok(a)),
                Err(e) => prop_assert!(e.starts_with("REBOUND_PUSH_ALLOW: entry "), "{}", e),
            }
        }

        #[test]
        fn networks_round_trip(net in any_net(), inside in any::<u128>()) {
            let parsed = Net::parse(&net.to_string());
            prop_assert_eq!(parsed, Ok(net));
            prop_assert!(net.contains(net.addr));
            // An address that shares the prefix is inside; flipping a prefix bit leaves it.
            let (addr, flipped) = match net.addr {
                IpAddr::V4(a) => {
                    let m = mask32(net.prefix);
                    let x = (u32::from(a) & m) | (inside as u32 & !m);
                    let f = (net.prefix > 0).then(|| x ^ (1u32 << (32 - u32::from(net.prefix))));
                    (IpAddr::V4(x.into()), f.map(|f| IpAddr::V4(f.into())))
                }
                IpAddr::V6(a) => {
                    let m = mask128(net.prefix);
                    let x = (u128::from(a) & m) | (inside & !m);
                    let f = (net.prefix > 0).then(|| x ^ (1u128 << (128 - u32::from(net.prefix))));
                    (IpAddr::V6(x.into()), f.map(|f| IpAddr::V6(f.into())))
                }
            };
            prop_assert!(net.contains(addr));
            if let Some(f) = flipped {
                prop_assert!(!net.contains(f));
            }
            let allow = Allow::parse(&net.to_string()).expect("a network");
            prop_assert!(allow.permits("h", addr));
        }

        #[test]
        fn embedded_ipv4_is_judged_as_ipv4(n in any::<u32>()) {
            let v4 = Ipv4Addr::from(n);
            let public = is_public(IpAddr::V4(v4));
            prop_assert_eq!(is_public(IpAddr::V6(v4.to_ipv6_mapped())), public);
            let [a, b, c, d] = v4.octets();
            let nat64 = Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d]));
            prop_assert_eq!(is_public(IpAddr::V6(nat64)), public);
            let six_to_four = Ipv6Addr::new(0x2002, u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d]), 0, 0, 0, 0, 1);
            prop_assert_eq!(is_public(IpAddr::V6(six_to_four)), public);
            prop_assert!(!is_public(IpAddr::V6(v4.to_ipv6_compatible())));
        }

        #[test]
        fn std_special_addresses_are_never_public(ip in any_ip()) {
            let special = ip.is_loopback() || ip.is_unspecified() || ip.is_multicast()
                || match ip {
                    IpAddr::V4(v4) => v4.is_private() || v4.is_link_local() || v4.is_broadcast()
                        || v4.is_documentation(),
                    IpAddr::V6(v6) => matches!(v6.segments()[0], 0xfc00..=0xfdff | 0xfe80..=0xfebf),
                };
            if special {
                prop_assert!(!is_public(ip));
            }
        }
    }
}
