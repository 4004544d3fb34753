//! [`IpPrefix`]: client keys that an attacker with a whole IPv6 network cannot multiply.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Keys clients by network prefix rather than by address: an IPv6 host usually owns a whole
/// /64 (2^64 addresses), so a limit keyed on the full address is no limit for it. One bucket per
/// /64 for IPv6 and per address (/32) for IPv4 by default; both lengths can be set.
///
/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, as a dual-stack socket reports IPv4 clients)
/// is keyed as the IPv4 address it carries.
///
/// ```
/// use core::net::IpAddr;
/// use tollgate::IpPrefix;
///
/// let by_network = IpPrefix::default(); // IPv4 /32, IPv6 /64
/// let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
/// let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
/// assert_eq!(by_network.key(a), by_network.key(b)); // one /64, one bucket
/// assert_eq!(by_network.key(a).to_string(), "2001:db8:1:2::");
///
/// let coarse = IpPrefix::new(24, 48);
/// let c: IpAddr = "192.0.2.77".parse().unwrap();
/// assert_eq!(coarse.key(c).to_string(), "192.0.2.0");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct IpPrefix {
    v4_bits: u8,
    v6_bits: u8,
}

impl IpPrefix {
    /// Keys IPv4 clients by their first `v4_bits` bits (at most 32) and IPv6 clients by their
    /// first `v6_bits` bits (at most 128); longer lengths are taken as the whole address.
    pub const fn new(v4_bits: u8, v6_bits: u8) -> Self {
        Self {
            v4_bits: if v4_bits > 32 { 32 } else { v4_bits },
            v6_bits: if v6_bits > 128 { 128 } else { v6_bits },
        }
    }

    /// The prefix lengths: `(IPv4 bits, IPv6 bits)`.
    pub const fn bits(&self) -> (u8, u8) {
        (self.v4_bits, self.v6_bits)
    }

    /// The key for `address`: the address with every bit past its prefix cleared.
    pub fn key(&self, address: IpAddr) -> IpAddr {
        match address {
            IpAddr::V4(v4) => IpAddr::V4(self.v4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(self.v4(v4)),
                None => IpAddr::V6(self.v6(v6)),
            },
        }
    }

    fn v4(&self, address: Ipv4Addr) -> Ipv4Addr {
        let mask = u32::MAX
            .checked_shl(32 - u32::from(self.v4_bits))
            .unwrap_or(0);
        Ipv4Addr::from(u32::from(address) & mask)
    }

    fn v6(&self, address: Ipv6Addr) -> Ipv6Addr {
        let mask = u128::MAX
            .checked_shl(128 - u32::from(self.v6_bits))
            .unwrap_or(0);
        Ipv6Addr::from(u128::from(address) & mask)
    }
}

impl Default for IpPrefix {
    /// IPv4 /32 (one bucket per address), IPv6 /64 (one bucket per network).
    fn default() -> Self {
        Self::new(32, 64)
    }
}
