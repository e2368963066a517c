//! What each ferro.talos module does.
//!
//! One file per Ansible module, each exposing its argument spec and a `run` function; module
//! binaries only call these. This crate decides changed/check/diff behaviour and writes files
//! (atomically, 0600); it never prints: the protocol crate owns stdout.

pub mod files;
