//! Binding the nodes' listeners before a cluster starts: port conflicts fail here, port 0 gets
//! a real port per node, and a cluster given address blocks takes the first free one.

use std::net::{Ipv4Addr, TcpListener};

use anyhow::{Context, Result, bail};

use crate::blocks::AddressBlocks;
use crate::config::SimConfig;
use crate::store::StoredCluster;

/// One per node; None for a node that must refuse connections.
pub type Listeners = Vec<Option<TcpListener>>;

fn bind(addr: Ipv4Addr, port: u16) -> Result<TcpListener> {
    let l = TcpListener::bind((addr, port))
        .with_context(|| format!("cannot listen on {addr}:{port}"))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Every node of a new cluster, at its address from the layout.
pub fn bind_new(cfg: &SimConfig) -> Result<Listeners> {
    (0..cfg.node_count())
        .map(|i| bind(cfg.address_of(i).context("node address")?, cfg.port).map(Some))
        .collect()
}

/// The nodes of a stored cluster that listen, at their stored addresses and ports; a node that
/// is down or unreachable is not bound.
pub fn bind_stored(c: &StoredCluster) -> Result<Listeners> {
    c.nodes
        .iter()
        .map(|n| {
            let up = (n.up && !n.reboot_pending) || !n.faults.never_return;
            let listens = up && !n.faults.unreachable && !n.faults.firewalled;
            listens.then(|| bind(n.address, n.port)).transpose()
        })
        .collect()
}

/// A new cluster at 127.0.B.1 in the first block of `blocks` where nothing listens and every
/// node binds.
pub fn bind_in_a_free_block(
    cfg: &SimConfig,
    blocks: &AddressBlocks,
) -> Result<(Ipv4Addr, Listeners)> {
    if cfg.node_count() > 254 {
        bail!(
            "{} nodes do not fit in a 127.0.B.0/24 block",
            cfg.node_count()
        );
    }
    let candidates = blocks.candidates();
    let busy = blocks.blocks().len() - candidates.len();
    bind_first_free(cfg, &candidates).map_err(|taken| {
        let taken = if taken.is_empty() {
            String::new()
        } else {
            let t: Vec<String> = taken.iter().map(u8::to_string).collect();
            format!(", and {} taken while starting", t.join(", "))
        };
        anyhow::anyhow!(
            "no free 127.0.B.0/24 block among {blocks}: {busy} in use by other listeners{taken}"
        )
    })
}

/// The first of `candidates` where every node binds; a block another process took since it
/// was found free (the bind fails with AddrInUse) is skipped, as is one that fails otherwise
/// (with the reason on stderr). Err: the blocks tried.
fn bind_first_free(cfg: &SimConfig, candidates: &[u8]) -> Result<(Ipv4Addr, Listeners), Vec<u8>> {
    let mut taken = Vec::new();
    for b in candidates {
        let base = AddressBlocks::base(*b);
        let at = SimConfig {
            base_address: base,
            ..cfg.clone()
        };
        match bind_new(&at) {
            Ok(listeners) => return Ok((base, listeners)),
            Err(e) if in_use(&e) => taken.push(*b),
            Err(e) => {
                eprintln!("talos-sim: block {b}: {e:#}");
                taken.push(*b);
            }
        }
    }
    Err(taken)
}

fn in_use(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::AddrInUse)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_taken_since_it_was_found_free_is_skipped() {
        // Another process holds node 1's address and port of block 242.
        let taken = TcpListener::bind("127.0.242.2:0").unwrap();
        let cfg = SimConfig {
            control_planes: 2,
            port: taken.local_addr().unwrap().port(),
            ..SimConfig::default()
        };
        let (base, listeners) = bind_first_free(&cfg, &[242, 243]).unwrap();
        assert_eq!(base, Ipv4Addr::new(127, 0, 243, 1));
        assert_eq!(listeners.len(), 2);
        drop(listeners);
        assert_eq!(bind_first_free(&cfg, &[242]).unwrap_err(), vec![242]);
    }
}
