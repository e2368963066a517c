//! Talos machine configuration: generation, patching, encoding, validation and redacted diffs.
//!
//! Renders `controlplane`/`worker` configs for a version contract from a secrets bundle, exactly as
//! `talosctl gen config` does (comment-free form), applies strategic-merge and RFC 6902 patches,
//! and compares configs with secrets masked. Pure data in, data out: no I/O, no network.

pub mod adopt;
pub mod contract;
pub mod convert_114;
pub mod deprecations;
pub mod diff;
pub mod disk_size;
pub mod document;
pub mod encode;
pub mod error;
mod fields;
pub mod generate;
pub mod image;
pub mod known_keys;
pub mod live;
pub mod merge;
pub mod normalize;
pub mod null_elements;
pub mod parse;
pub mod patch;
pub mod redact;
pub mod risk;
pub mod validate;

pub use document::MachineConfig;
pub use error::{Error, ErrorKind, Result};
