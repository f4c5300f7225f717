//! Who may use a forward proxy (the proxy's, a coop node's browser proxy and gateway), and where it
//! may go: an open forward proxy lets anyone reach
//! the services behind it (other processes on loopback, cloud metadata on link-local, a private
//! network) and the proxy's own control endpoints.
//!
//! Clients are checked against `allow_clients` before anything else is done for an
//! absolute-form request or a CONNECT. A destination is checked after it is resolved, on every
//! address the name gave, and only the addresses that pass are connected to
//! ([`Access::resolve`]), so no spelling of an address (`2130706433`, `0x7f.1`, `0.0.0.0`,
//! `[::ffff:127.0.0.1]`, a name resolving to loopback) and no second answer of the resolver (DNS
//! rebinding) reaches a refused one. A reverse proxy's configured origins and parents are the
//! operator's and are never checked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

/// An address range in CIDR notation (`10.0.0.0/8`, `fc00::/7`); a bare address is a range of
/// one. IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) are matched as the IPv4 address they
/// carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

/// A range that is not `ADDRESS/PREFIX` with a prefix no longer than the address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an address range (give e.g. 10.0.0.0/8, fc00::/7 or 127.0.0.1)")]
pub struct ParseCidrError(pub String);

impl FromStr for Cidr {
    type Err = ParseCidrError;

    fn from_str(s: &str) -> Result<Cidr, ParseCidrError> {
        let bad = || ParseCidrError(s.to_owned());
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr.trim().parse().map_err(|_| bad())?;
        let addr = addr.to_canonical();
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= bits)
                .ok_or_else(bad)?,
        };
        Ok(Cidr { addr, prefix })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Cidr {
    /// Whether `ip` lies in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => prefix_match(
                u128::from(net.to_bits()),
                u128::from(ip.to_bits()),
                self.prefix,
                32,
            ),
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_match(net.to_bits(), ip.to_bits(), self.prefix, 128)
            }
            _ => false,
        }
    }
}

fn prefix_match(net: u128, ip: u128, prefix: u8, bits: u32) -> bool {
    let prefix = u32::from(prefix);
    if prefix == 0 {
        return true;
    }
    let shift = bits - prefix;
    (net >> shift) == (ip >> shift)
}

/// The clients a forward proxy serves by default: loopback and the private ranges (RFC 1918,
/// RFC 4193). Link-local clients are not among them: a link-local address is not one a client
/// normally has, and an operator whose clients have one can list `169.254.0.0/16` or
/// `fe80::/10`.
pub const DEFAULT_CLIENTS: [&str; 6] = [
    "127.0.0.0/8",
    "::1/128",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "fc00::/7",
];

/// Destinations a forward proxy never reaches unless `allow_destinations` lists them: this
/// host, the "this network", private, shared (carrier-grade NAT, where some clouds keep their
/// metadata service), link-local (where most keep it), multicast and reserved IPv4 ranges; the
/// IPv6 unspecified, loopback, unique-local, link-local, site-local and multicast ones.
/// IPv4-mapped (`::ffff:0:0/96`), IPv4-compatible (`::/96`) and NAT64 (`64:ff9b::/96`) IPv6
/// addresses are judged by the IPv4 address they carry.
const REFUSED_V4: [(Ipv4Addr, u8); 9] = [
    (Ipv4Addr::new(0, 0, 0, 0), 8),
    (Ipv4Addr::new(10, 0, 0, 0), 8),
    (Ipv4Addr::new(100, 64, 0, 0), 10),
    (Ipv4Addr::new(127, 0, 0, 0), 8),
    (Ipv4Addr::new(169, 254, 0, 0), 16),
    (Ipv4Addr::new(172, 16, 0, 0), 12),
    (Ipv4Addr::new(192, 168, 0, 0), 16),
    (Ipv4Addr::new(224, 0, 0, 0), 4),
    (Ipv4Addr::new(240, 0, 0, 0), 4),
];

const REFUSED_V6: [(Ipv6Addr, u8); 6] = [
    (Ipv6Addr::UNSPECIFIED, 128),
    (Ipv6Addr::LOCALHOST, 128),
    (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7),
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10),
    (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10),
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8),
];

/// Whether `ip` is in one of the ranges a forward proxy refuses by default.
pub fn internal(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => REFUSED_V4.iter().any(|(net, prefix)| {
            prefix_match(
                u128::from(net.to_bits()),
                u128::from(v4.to_bits()),
                *prefix,
                32,
            )
        }),
        IpAddr::V6(v6) => {
            let bits = v6.to_bits();
            // ::/96 (IPv4-compatible, deprecated) and 64:ff9b::/96 (NAT64) carry an IPv4
            // address in their last 32 bits; :: and ::1 are matched below.
            let embedded = bits >> 32 == 0 || bits >> 32 == 0x0064_ff9b_0000_0000_0000_0000;
            if embedded && bits > 1 {
                return internal(IpAddr::V4(Ipv4Addr::from_bits(bits as u32)));
            }
            REFUSED_V6
                .iter()
                .any(|(net, prefix)| prefix_match(net.to_bits(), bits, *prefix, 128))
        }
    }
}

/// Whether `ip:port` is the listener `listener`: its address, or with a listener on every
/// interface (`0.0.0.0`, `::`), any address of this host. A listener on port 0 (a test's
/// ephemeral port) is not known here; Via still stops a request that comes back.
fn is_listener(listener: SocketAddr, ip: IpAddr, port: u16) -> bool {
    let at = listener.ip().to_canonical();
    if listener.port() == 0 || port != listener.port() {
        return false;
    }
    if ip == at || ip.is_unspecified() {
        return true;
    }
    // An address of this host is one a socket can be bound to.
    at.is_unspecified() && std::net::UdpSocket::bind((ip, 0)).is_ok()
}

/// Why a destination was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Every address of the destination is internal and not in `allow_destinations`.
    #[error("{host}: {addr} is an internal address not in allow_destinations")]
    Internal {
        /// The name or address the client asked for.
        host: String,
        /// The first refused address it resolved to.
        addr: IpAddr,
    },
    /// The destination is one of this proxy's own listeners ([`Access::own`] included).
    #[error("{host}: {addr} is this proxy's own listener")]
    Itself {
        /// The name or address the client asked for.
        host: String,
        /// The listener's address.
        addr: SocketAddr,
    },
}

/// Why a destination could not be used: refused, or not resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The policy refused it.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The name did not resolve.
    #[error("cannot resolve {host}")]
    Lookup {
        /// The name.
        host: String,
        /// The resolver's error.
        #[source]
        source: std::io::Error,
    },
}

/// The forward proxy's access rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// The clients served (`allow_clients`).
    pub clients: Vec<Cidr>,
    /// Internal destinations reached anyway (`allow_destinations`).
    pub destinations: Vec<Cidr>,
    /// The proxy's own listener, never a destination.
    pub listener: SocketAddr,
    /// The process's other listeners (a coop node's peer-to-peer ports), never destinations
    /// either, even when listed; one on every interface (`0.0.0.0`, `::`) stands for its port on
    /// any address of this host.
    pub own: Vec<SocketAddr>,
}

impl Access {
    /// Whether `peer` may use the forward proxy.
    pub fn client_allowed(&self, peer: IpAddr) -> bool {
        self.clients.iter().any(|c| c.contains(peer))
    }

    /// Why `addr` may not be connected to, if it may not.
    pub fn refused(&self, host: &str, addr: SocketAddr) -> Option<Refused> {
        let ip = addr.ip().to_canonical();
        if let Some(listener) = std::iter::once(&self.listener)
            .chain(&self.own)
            .find(|l| is_listener(**l, ip, addr.port()))
        {
            return Some(Refused::Itself {
                host: host.to_owned(),
                addr: *listener,
            });
        }
        (internal(ip) && !self.destinations.iter().any(|c| c.contains(ip))).then(|| {
            Refused::Internal {
                host: host.to_owned(),
                addr: ip,
            }
        })
    }

    /// The addresses of `host:port` that may be connected to, in the resolver's order; an IP
    /// literal (`[::1]` with brackets, as in a URI) is not resolved. Refused when none remain.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, ResolveError> {
        let literal = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let found: Vec<SocketAddr> = match literal.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((literal, port))
                .await
                .map_err(|source| ResolveError::Lookup {
                    host: host.to_owned(),
                    source,
                })?
                .collect(),
        };
        let mut first_refusal = None;
        let allowed: Vec<SocketAddr> = found
            .into_iter()
            .filter(|a| match self.refused(host, *a) {
                None => true,
                Some(r) => {
                    first_refusal.get_or_insert(r);
                    false
                }
            })
            .collect();
        match (allowed.is_empty(), first_refusal) {
            (true, Some(refusal)) => Err(refusal.into()),
            (true, None) => Err(ResolveError::Lookup {
                host: host.to_owned(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no address"),
            }),
            (false, _) => Ok(allowed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(destinations: &[&str], listener: &str) -> Access {
        Access {
            clients: DEFAULT_CLIENTS
                .iter()
                .map(|c| c.parse().expect("cidr"))
                .collect(),
            destinations: destinations
                .iter()
                .map(|c| c.parse().expect("cidr"))
                .collect(),
            listener: listener.parse().expect("addr"),
            own: Vec::new(),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn ranges_parse_and_match() {
        let c: Cidr = "10.0.0.0/8".parse().expect("cidr");
        assert!(c.contains(ip("10.255.1.2")));
        assert!(!c.contains(ip("11.0.0.1")));
        assert!(c.contains(ip("::ffff:10.1.2.3")), "IPv4-mapped");
        let one: Cidr = "127.0.0.1".parse().expect("cidr");
        assert!(one.contains(ip("127.0.0.1")) && !one.contains(ip("127.0.0.2")));
        let all: Cidr = "0.0.0.0/0".parse().expect("cidr");
        assert!(all.contains(ip("8.8.8.8")) && !all.contains(ip("2001:db8::1")));
        let v6: Cidr = "fc00::/7".parse().expect("cidr");
        assert!(v6.contains(ip("fd12::1")) && !v6.contains(ip("fe80::1")));
        for bad in [
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "localhost",
            "10.0.0.0/x",
            "",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn internal_addresses_in_every_spelling_are_refused_by_default() {
        let a = access(&[], "127.0.0.1:3128");
        for refused in [
            "127.0.0.1",
            "127.1.2.3",
            "0.0.0.0",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.100.100.200",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "fd00::1",
            "fe80::1",
            "ff02::1",
        ] {
            assert!(
                a.refused("h", SocketAddr::new(ip(refused), 80)).is_some(),
                "{refused}"
            );
        }
        for allowed in [
            "8.8.8.8",
            "172.32.0.1",
            "192.169.0.1",
            "2001:db8::1",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert_eq!(
                a.refused("h", SocketAddr::new(ip(allowed), 80)),
                None,
                "{allowed}"
            );
        }
    }

    #[test]
    fn allow_destinations_opens_a_range_but_never_the_proxy_itself() {
        let a = access(&["127.0.0.0/8"], "127.0.0.1:3128");
        assert_eq!(
            a.refused("h", "127.0.0.1:8080".parse().expect("addr")),
            None
        );
        assert_eq!(
            a.refused("h", "[::ffff:127.0.0.2]:80".parse().expect("addr")),
            None
        );
        assert!(matches!(
            a.refused("h", "127.0.0.1:3128".parse().expect("addr")),
            Some(Refused::Itself { .. })
        ));
        assert!(matches!(
            a.refused("h", "0.0.0.0:3128".parse().expect("addr")),
            Some(Refused::Itself { .. })
        ));
        assert!(a.refused("h", "[::1]:80".parse().expect("addr")).is_some());
        // On every interface: any address of this host on the port.
        let any = access(&["127.0.0.0/8"], "0.0.0.0:3128");
        assert!(matches!(
            any.refused("h", "127.0.0.5:3128".parse().expect("addr")),
            Some(Refused::Itself { .. })
        ));
        assert_eq!(
            any.refused("h", "127.0.0.5:3129".parse().expect("addr")),
            None
        );
        // The process's other listeners (a coop node's p2p port on every interface) too.
        let mut coop = access(&["127.0.0.0/8"], "127.0.0.1:3128");
        coop.own = vec!["0.0.0.0:4001".parse().expect("addr")];
        for to in [
            "127.0.0.1:4001",
            "127.0.0.9:4001",
            "[::ffff:127.0.0.1]:4001",
        ] {
            assert!(
                matches!(
                    coop.refused("h", to.parse().expect("addr")),
                    Some(Refused::Itself { .. })
                ),
                "{to}"
            );
        }
        assert_eq!(
            coop.refused("h", "127.0.0.1:4002".parse().expect("addr")),
            None
        );
    }

    #[test]
    fn clients_outside_the_ranges_are_not_served() {
        let a = access(&[], "127.0.0.1:3128");
        for ok in [
            "127.0.0.1",
            "::1",
            "10.1.1.1",
            "192.168.0.9",
            "fd00::7",
            "::ffff:10.0.0.1",
        ] {
            assert!(a.client_allowed(ip(ok)), "{ok}");
        }
        for no in ["8.8.8.8", "2001:db8::1", "169.254.1.1", "172.32.0.1"] {
            assert!(!a.client_allowed(ip(no)), "{no}");
        }
    }

    #[tokio::test]
    async fn names_and_numeric_spellings_are_judged_by_what_they_resolve_to() {
        let a = access(&[], "127.0.0.1:3128");
        // Resolved on this machine only: every one of these is loopback or unspecified, so
        // nothing leaves it.
        for host in [
            "localhost",
            "2130706433",
            "0x7f.1",
            "127.1",
            "0.0.0.0",
            "[::1]",
            "[::ffff:127.0.0.1]",
        ] {
            match a.resolve(host, 80).await {
                Err(ResolveError::Refused(_)) => {}
                other => panic!("{host}: {other:?}"),
            }
        }
        let open = access(&["127.0.0.0/8", "::1/128"], "127.0.0.1:3128");
        let addrs = open.resolve("127.0.0.1", 80).await.expect("allowed");
        assert_eq!(addrs, vec!["127.0.0.1:80".parse().expect("addr")]);
    }
}
