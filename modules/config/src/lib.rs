//! Talos machine configuration: generation, patching, encoding, validation and redacted diffs.
//!
//! Renders `controlplane`/`worker` configs for a version contract from a secrets bundle, exactly as
//! `talosctl gen config` does (comment-free form), applies strategic-merge and RFC 6902 patches,
//! and compares configs with secrets masked. Pure data in, data out: no I/O, no network.

pub mod document;

pub use document::MachineConfig;
pub mod diff;
pub mod merge;
pub mod patch;
pub mod live;
pub mod redact;
pub mod risk;
pub mod validate;
pub mod contract;
pub mod encode;
mod key_order;
pub mod parse;
pub mod generate;
