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
//! What is inside is a real, if tiny, bbolt database, because `talosctl etcd snapshot` opens the
//! file with etcd's own `etcdutl/snapshot` `Status` (`cmd/talosctl/cmd/talos/etcd.go` @ v1.13.9
//! and v1.14.1): bbolt checks both meta pages' FNV-64a checksums and every page (`tx.Check`), and
//! etcd reads each revision and `mvccpb.KeyValue` of the `key` bucket. Its keys hold the
//! simulator's marker (the member count), enough for tests. Of an upload the simulator keeps
//! only what the restore checks ([`Uploaded`]), so an upload of any size costs it no memory, as
//! Talos writes one to disk as it comes.

use sha2::{Digest, Sha256};

const PAGE: usize = 4096;
const MAGIC: u32 = 0xED0C_DAED;

// bbolt's on-disk layout (go.etcd.io/bbolt v1.4.3, the version etcd v3.6 links:
// `internal/common/page.go`, `meta.go`, `bucket.go`): a 16-byte page header (id u64, flags u16,
// count u16, overflow u32); leaf elements of 16 bytes (flags u32, pos u32 from the element,
// ksize u32, vsize u32); a bucket's value is its root page id and sequence, followed by the
// bucket's own page when it is inline (root 0).
const LEAF: u16 = 0x02;
const META: u16 = 0x04;
const FREELIST: u16 = 0x10;
const BUCKET_LEAF_FLAG: u32 = 0x01;

fn page_header(out: &mut Vec<u8>, id: u64, flags: u16, count: u16) {
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
}

/// A leaf page (header, elements, then keys and values) of sorted (flags, key, value) items.
fn leaf(id: u64, items: &[(u32, Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    page_header(&mut out, id, LEAF, items.len() as u16);
    let mut data = Vec::new();
    let elements_end = 16 + 16 * items.len();
    for (i, (flags, k, v)) in items.iter().enumerate() {
        let element = 16 + 16 * i;
        let pos = elements_end + data.len() - element;
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&(pos as u32).to_le_bytes());
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        data.extend_from_slice(k);
        data.extend_from_slice(v);
    }
    out.extend_from_slice(&data);
    out
}

/// FNV-64a, bbolt's meta page checksum (`Meta.Sum64`).
fn fnv64a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn meta_page(id: u64, root: u64, freelist: u64, high_water: u64, txid: u64) -> Vec<u8> {
    let mut out = Vec::new();
    page_header(&mut out, id, META, 0);
    let mut meta = Vec::new();
    meta.extend_from_slice(&MAGIC.to_le_bytes());
    meta.extend_from_slice(&2u32.to_le_bytes()); // version
    meta.extend_from_slice(&(PAGE as u32).to_le_bytes());
    meta.extend_from_slice(&0u32.to_le_bytes()); // flags
    meta.extend_from_slice(&root.to_le_bytes()); // root bucket: page
    meta.extend_from_slice(&0u64.to_le_bytes()); // root bucket: sequence
    meta.extend_from_slice(&freelist.to_le_bytes());
    meta.extend_from_slice(&high_water.to_le_bytes());
    meta.extend_from_slice(&txid.to_le_bytes());
    let sum = fnv64a(&meta);
    meta.extend_from_slice(&sum.to_le_bytes());
    out.extend_from_slice(&meta);
    out
}

/// A protobuf varint.
fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// etcd's `mvccpb.KeyValue` (api/mvccpb/kv.proto @ v3.6: key 1, create_revision 2,
/// mod_revision 3, version 4, value 5).
fn key_value(key: &[u8], revision: u64, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.push(0x0a);
    varint(&mut out, key.len() as u64);
    out.extend_from_slice(key);
    for tag in [0x10, 0x18] {
        out.push(tag);
        varint(&mut out, revision);
    }
    out.extend_from_slice(&[0x20, 1]);
    out.push(0x2a);
    varint(&mut out, value.len() as u64);
    out.extend_from_slice(value);
    out
}

/// A revision as etcd keys the `key` bucket by it: main and sub, big-endian, joined by `_`
/// (server/storage/mvcc/revision.go @ v3.6).
fn revision_key(main: u64) -> Vec<u8> {
    let mut k = main.to_be_bytes().to_vec();
    k.push(b'_');
    k.extend_from_slice(&0u64.to_be_bytes());
    k
}

/// A snapshot of a cluster with `members` members: bbolt's two meta pages, the root bucket's
/// page (inline `key` and `meta` buckets: one key per member and the marker, the applied index
/// and the storage version), an empty freelist, and
/// the SHA-256 trailer etcd appends to a snapshot stream.
pub fn make(members: usize) -> Vec<u8> {
    let marker = format!("talos-sim etcd snapshot\nmembers: {members}\n");
    let mut kvs = vec![(
        0,
        revision_key(1),
        key_value(b"/talos-sim/snapshot", 1, marker.as_bytes()),
    )];
    for m in 0..members {
        let revision = m as u64 + 2;
        kvs.push((
            0,
            revision_key(revision),
            key_value(
                format!("/talos-sim/member/{m}").as_bytes(),
                revision,
                b"member",
            ),
        ));
    }
    let revision = members as u64 + 1;
    // etcd's `meta` bucket (server/storage/schema/schema.go, version.go @ v3.6): the applied
    // index and term, and the storage version etcdutl's Status reads (a snapshot without the
    // bucket crashes it).
    let meta = vec![
        (
            0,
            b"consistent_index".to_vec(),
            revision.to_be_bytes().to_vec(),
        ),
        (0, b"storageVersion".to_vec(), b"3.6.0".to_vec()),
        (0, b"term".to_vec(), 2u64.to_be_bytes().to_vec()),
    ];
    let inline = |items: &[(u32, Vec<u8>, Vec<u8>)]| {
        let mut value = vec![0u8; 16]; // root 0 (inline), sequence 0
        value.extend_from_slice(&leaf(0, items));
        value
    };
    let root = leaf(
        2,
        &[
            (BUCKET_LEAF_FLAG, b"key".to_vec(), inline(&kvs)),
            (BUCKET_LEAF_FLAG, b"meta".to_vec(), inline(&meta)),
        ],
    );
    let mut freelist = Vec::new();
    page_header(&mut freelist, 3, FREELIST, 0);

    let mut db = vec![0u8; 4 * PAGE];
    for (index, page) in [
        meta_page(0, 2, 3, 4, 0),
        meta_page(1, 2, 3, 4, 1),
        root,
        freelist,
    ]
    .into_iter()
    .enumerate()
    {
        assert!(page.len() <= PAGE, "a snapshot page overflows");
        db[index * PAGE..index * PAGE + page.len()].copy_from_slice(&page);
    }
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
