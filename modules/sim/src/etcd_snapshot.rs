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
//! What is inside is not a real database: a marker and the member count, enough for tests. Of an
//! upload the simulator keeps only what the restore checks ([`Uploaded`]), so an upload of any
//! size costs it no memory, as Talos writes one to disk as it comes.

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

/// How much of an upload's start is kept: the meta pages and the simulator's marker page.
const HEAD: usize = 3 * PAGE;

/// An upload as it comes in, a chunk at a time.
#[derive(Default)]
pub struct Upload {
    size: u64,
    head: Vec<u8>,
    /// SHA-256 of every byte but the last 32 seen so far...
    body: Sha256,
    /// ...which are held back here: they are the trailer if the upload ends now.
    last: Vec<u8>,
}

impl Upload {
    pub fn push(&mut self, bytes: &[u8]) {
        self.size += bytes.len() as u64;
        let more_head = (HEAD - self.head.len()).min(bytes.len());
        self.head.extend_from_slice(&bytes[..more_head]);
        let held = self.last.len() + bytes.len();
        if held <= 32 {
            self.last.extend_from_slice(bytes);
            return;
        }
        let release = held - 32;
        let from_last = release.min(self.last.len());
        self.body.update(&self.last[..from_last]);
        let from_bytes = release - from_last;
        self.body.update(&bytes[..from_bytes]);
        let mut last = self.last[from_last..].to_vec();
        last.extend_from_slice(&bytes[from_bytes..]);
        self.last = last;
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn finish(self) -> Uploaded {
        Uploaded {
            size: self.size,
            head: self.head,
            body_sha256: self.body.finalize().into(),
            last: self.last,
        }
    }
}

/// A complete upload (`/var/lib/etcd.snapshot`), as far as the restore looks at it.
#[derive(Clone, Debug, PartialEq)]
pub struct Uploaded {
    size: u64,
    head: Vec<u8>,
    /// SHA-256 of all but the last 32 bytes (of all, for an upload of less than 32).
    body_sha256: [u8; 32],
    /// The last 32 bytes (fewer for a shorter upload).
    last: Vec<u8>,
}

impl Uploaded {
    /// A whole file as an upload in one piece.
    #[cfg(test)]
    pub fn of(data: &[u8]) -> Uploaded {
        let mut upload = Upload::default();
        upload.push(data);
        upload.finish()
    }
}

/// Go's `%v` of a byte slice: `[1 2 3]`.
fn go_bytes(b: &[u8]) -> String {
    let items: Vec<String> = b.iter().map(u8::to_string).collect();
    format!("[{}]", items.join(" "))
}

/// What the etcd service's pre stage says of the uploaded snapshot: Ok, or the message its
/// failure leaves on the service.
pub fn restore_check(snapshot: Option<&Uploaded>, skip_hash_check: bool) -> Result<(), String> {
    let Some(up) = snapshot else {
        return Err(
            "Failed to run pre stage: error verifying snapshot: stat /var/lib/etcd.snapshot: no such file or directory"
                .into(),
        );
    };
    let head = &up.head;
    let magic_ok =
        head.len() >= 20 && u32::from_le_bytes([head[16], head[17], head[18], head[19]]) == MAGIC;
    if !magic_ok {
        return Err("Failed to run pre stage: error verifying snapshot: invalid database".into());
    }
    let has_hash = up.size % 512 == 32;
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
    if up.body_sha256.as_slice() != up.last.as_slice() {
        return Err(format!(
            "Failed to run pre stage: error recovering from the snapshot: expected sha256 {}, got {}",
            go_bytes(&up.last),
            go_bytes(&up.body_sha256)
        ));
    }
    Ok(())
}

/// How many members the snapshot's cluster had (the simulator's marker), when it says.
#[cfg(test)]
pub fn members_of(up: &Uploaded) -> Option<usize> {
    let text = String::from_utf8_lossy(up.head.get(2 * PAGE..3 * PAGE)?);
    text.lines()
        .find_map(|l| l.strip_prefix("members: "))
        .and_then(|n| n.trim_end_matches('\0').trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_restores_and_damage_is_named() {
        let check = |data: &[u8], skip| restore_check(Some(&Uploaded::of(data)), skip);
        let good = make(3);
        assert_eq!(good.len() % 512, 32);
        assert_eq!(check(&good, false), Ok(()));
        assert_eq!(members_of(&Uploaded::of(&good)), Some(3));
        let mut bad = good.clone();
        bad[3 * PAGE] ^= 1;
        assert!(
            check(&bad, false)
                .unwrap_err()
                .contains("expected sha256 [")
        );
        assert_eq!(check(&bad, true), Ok(()));
        let raw = &good[..good.len() - 32];
        assert!(check(raw, false).unwrap_err().contains("missing hash"));
        assert_eq!(check(raw, true), Ok(()));
        assert!(
            check(b"not a database", true)
                .unwrap_err()
                .ends_with("invalid database")
        );
        assert!(
            restore_check(None, false)
                .unwrap_err()
                .contains("no such file")
        );
    }

    /// An upload in chunks of any size keeps what the whole file would: the trailer may be split
    /// across chunks, or come in a chunk shorter than itself.
    #[test]
    fn an_upload_in_pieces_is_the_file_in_one() {
        let good = make(2);
        let whole = Uploaded::of(&good);
        for piece in [1, 7, 31, 32, 33, 4096, 5000, good.len()] {
            let mut up = Upload::default();
            for chunk in good.chunks(piece) {
                up.push(chunk);
            }
            assert_eq!(up.size(), good.len() as u64);
            assert_eq!(up.finish(), whole, "pieces of {piece}");
        }
        assert_eq!(restore_check(Some(&whole), false), Ok(()));
    }
}
