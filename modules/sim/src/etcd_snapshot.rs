//! The etcd snapshots the simulator hands out (EtcdSnapshot) and takes back (EtcdRecover, then
//! Bootstrap with `recover_etcd`), checked as etcd's snapshot library checks them when the etcd
//! service restores one (etcd v3.6.12 `etcdutl/snapshot` as Talos's
//! `internal/app/machined/pkg/system/services/etcd.go` calls it at v1.13.9):
//! - the file must open as a bbolt database: the meta page's magic 0xED0CDAED at offset 16;
//! - a size of 32 more than a multiple of 512 means a SHA-256 trailer, which the etcd server
//!   appends to a snapshot stream (`v3rpc/maintenance.go`); without it the restore needs
//!   `skip hash check` (a copy of the data directory's db), with it the hash must match unless
//!   skipped.
//!
//! What is inside is not a real database: a marker and the member count, enough for tests.

use sha2::{Digest, Sha256};

const PAGE: usize = 4096;
const MAGIC: u32 = 0xED0C_DAED;

/// A snapshot of a cluster with `members` members: sixteen pages with bbolt's meta pages, and
/// the SHA-256 trailer.
pub fn make(members: usize) -> Vec<u8> {
    let mut db = vec![0u8; 16 * PAGE];
    for page in 0..2 {
        let meta = page * PAGE + 16;
        db[meta..meta + 4].copy_from_slice(&MAGIC.to_le_bytes());
        db[meta + 4..meta + 8].copy_from_slice(&2u32.to_le_bytes());
        db[meta + 8..meta + 12].copy_from_slice(&(PAGE as u32).to_le_bytes());
    }
    let marker = format!("talos-sim etcd snapshot\nmembers: {members}\n");
    db[2 * PAGE..2 * PAGE + marker.len()].copy_from_slice(marker.as_bytes());
    let trailer = Sha256::digest(&db);
    db.extend_from_slice(&trailer);
    db
}

/// Go's `%v` of a byte slice: `[1 2 3]`.
fn go_bytes(b: &[u8]) -> String {
    let items: Vec<String> = b.iter().map(u8::to_string).collect();
    format!("[{}]", items.join(" "))
}

/// What the etcd service's pre stage says of the uploaded snapshot: Ok, or the message its
/// failure leaves on the service.
pub fn restore_check(snapshot: Option<&[u8]>, skip_hash_check: bool) -> Result<(), String> {
    let Some(data) = snapshot else {
        return Err(
            "Failed to run pre stage: error verifying snapshot: stat /var/lib/etcd.snapshot: no such file or directory"
                .into(),
        );
    };
    let magic_ok =
        data.len() >= 20 && u32::from_le_bytes([data[16], data[17], data[18], data[19]]) == MAGIC;
    if !magic_ok {
        return Err("Failed to run pre stage: error verifying snapshot: invalid database".into());
    }
    let has_hash = data.len() % 512 == 32;
    if !has_hash {
        return if skip_hash_check {
            Ok(())
        } else {
            Err(
                "Failed to run pre stage: error recovering from the snapshot: snapshot missing hash but --skip-hash-check=false"
                    .into(),
            )
        };
    }
    if skip_hash_check {
        return Ok(());
    }
    let (db, trailer) = data.split_at(data.len() - 32);
    let computed = Sha256::digest(db);
    if computed.as_slice() != trailer {
        return Err(format!(
            "Failed to run pre stage: error recovering from the snapshot: expected sha256 {}, got {}",
            go_bytes(trailer),
            go_bytes(&computed)
        ));
    }
    Ok(())
}

/// How many members the snapshot's cluster had (the simulator's marker), when it says.
#[cfg(test)]
pub fn members_of(data: &[u8]) -> Option<usize> {
    let text = String::from_utf8_lossy(data.get(2 * PAGE..3 * PAGE)?);
    text.lines()
        .find_map(|l| l.strip_prefix("members: "))
        .and_then(|n| n.trim_end_matches('\0').trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_restores_and_damage_is_named() {
        let good = make(3);
        assert_eq!(good.len() % 512, 32);
        assert_eq!(restore_check(Some(&good), false), Ok(()));
        assert_eq!(members_of(&good), Some(3));
        let mut bad = good.clone();
        bad[3 * PAGE] ^= 1;
        assert!(
            restore_check(Some(&bad), false)
                .unwrap_err()
                .contains("expected sha256 [")
        );
        assert_eq!(restore_check(Some(&bad), true), Ok(()));
        let raw = &good[..good.len() - 32];
        assert!(
            restore_check(Some(raw), false)
                .unwrap_err()
                .contains("missing hash")
        );
        assert_eq!(restore_check(Some(raw), true), Ok(()));
        assert!(
            restore_check(Some(b"not a database"), true)
                .unwrap_err()
                .ends_with("invalid database")
        );
        assert!(
            restore_check(None, false)
                .unwrap_err()
                .contains("no such file")
        );
    }
}
