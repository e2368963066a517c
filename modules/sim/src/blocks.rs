//! Loopback address blocks for simulated clusters: `127.0.B.0/24`, the nodes on 127.0.B.1 and
//! up. A cluster started with [`crate::SimConfig::address_blocks`] takes a free block of the
//! list, so concurrent simulators (parallel tests, Molecule scenarios, leftovers of an aborted
//! run) never share addresses. Who uses which blocks (docs/talos-sim.md): `make demo` 10, the
//! Molecule scenarios 2-9 and 11-19, the pytest suite 20-249.

use std::collections::BTreeSet;
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// A list of blocks, e.g. `2-9,11-19`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddressBlocks {
    blocks: Vec<u8>,
    text: String,
}

impl AddressBlocks {
    pub fn blocks(&self) -> &[u8] {
        &self.blocks
    }

    /// The first address of block `b`.
    pub fn base(b: u8) -> Ipv4Addr {
        Ipv4Addr::new(127, 0, b, 1)
    }

    /// The block of a base address `127.0.B.1`, if it is one.
    pub fn block_of(base: Ipv4Addr) -> Option<u8> {
        match base.octets() {
            [127, 0, b, 1] if (1..=254).contains(&b) => Some(b),
            _ => None,
        }
    }

    /// The blocks to try, in order: those nothing listens in, starting at a random one of the
    /// list and going round it, so that consecutive clusters rarely get the same block (a
    /// client of the last one still retrying never reaches the next).
    pub fn candidates(&self) -> Vec<u8> {
        let busy = busy_blocks();
        let start = rand::random::<u32>() as usize % self.blocks.len();
        let (before, after) = self.blocks.split_at(start);
        after
            .iter()
            .chain(before)
            .copied()
            .filter(|b| !busy.contains(b))
            .collect()
    }
}

impl FromStr for AddressBlocks {
    type Err = String;

    /// `B`, `A-B` or a comma-separated list of them; blocks are 1-254 (block 0 holds
    /// 127.0.0.1, 255 broadcast addresses).
    fn from_str(s: &str) -> Result<Self, String> {
        let mut blocks = Vec::new();
        for item in s.split(',').map(str::trim) {
            let (a, b) = item.split_once('-').unwrap_or((item, item));
            let parse = |v: &str| -> Result<u8, String> {
                v.trim()
                    .parse::<u8>()
                    .ok()
                    .filter(|b| (1..=254).contains(b))
                    .ok_or_else(|| {
                        format!("{item:?} is not a block or a range of blocks (A-B, each 1-254)")
                    })
            };
            let (a, b) = (parse(a)?, parse(b)?);
            if a > b {
                return Err(format!("{item:?}: the range goes down"));
            }
            for b in a..=b {
                if !blocks.contains(&b) {
                    blocks.push(b);
                }
            }
        }
        Ok(AddressBlocks {
            blocks,
            text: s.to_string(),
        })
    }
}

impl fmt::Display for AddressBlocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Blocks with a TCP listener on any of their addresses (Linux: /proc/net/tcp; elsewhere none
/// are known, and a taken block shows when binding fails).
fn busy_blocks() -> BTreeSet<u8> {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    listening_blocks(&text)
}

/// The blocks of 127.0.B.x addresses in LISTEN state in a /proc/net/tcp table, whose local
/// address is the IPv4 address as a little-endian hex number, then `:PORT`; state 0A is LISTEN.
fn listening_blocks(table: &str) -> BTreeSet<u8> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let local = fields.nth(1)?;
            let state = fields.nth(1)?;
            if state != "0A" {
                return None;
            }
            let addr = u32::from_str_radix(local.split(':').next()?, 16).ok()?;
            let [a, b, c, _] = addr.to_le_bytes();
            (a == 127 && b == 0).then_some(c)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_ranges() {
        let b: AddressBlocks = "2-9,11-19".parse().unwrap();
        assert_eq!(b.blocks().len(), 17);
        assert!(!b.blocks().contains(&10));
        assert_eq!(b.to_string(), "2-9,11-19");
        assert_eq!("12".parse::<AddressBlocks>().unwrap().blocks(), &[12]);
        for bad in ["0-3", "250-255", "9-2", "x", "", "3,"] {
            assert!(bad.parse::<AddressBlocks>().is_err(), "{bad}");
        }
        let c = "20-249".parse::<AddressBlocks>().unwrap().candidates();
        assert!(c.iter().all(|b| (20..=249).contains(b)));
        let mut sorted = c.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), c.len(), "each block once");
        assert_eq!(AddressBlocks::block_of(AddressBlocks::base(12)), Some(12));
        assert_eq!(AddressBlocks::block_of(Ipv4Addr::new(127, 1, 2, 1)), None);
    }

    #[test]
    fn listeners_in_proc_net_tcp() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
            0: 0100007F:C350 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n   \
            1: 010C007F:C350 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1\n   \
            2: 0113007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 3 1\n   \
            3: 0100000A:C350 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4 1\n";
        // 127.0.0.1 and 127.0.12.1 listen; 127.0.19.1 only has a connection; 10.0.0.1 is no loopback.
        assert_eq!(listening_blocks(table), BTreeSet::from([0, 12]));
    }
}
