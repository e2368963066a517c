//! YAML written the way go-yaml writes it, so that what the collection writes (machine configs,
//! `secrets.yaml`, talosconfig files, Image Factory schematics) is byte for byte what Talos and the
//! factory write, and hashes the same.
//!
//! One implementation for every crate that writes YAML for Go programs to read or hash:
//! [`style`] picks a string's style, [`resolve`](crate) says which plain text would read back as
//! another type, [`quote`] writes the quoted forms, [`order`] sorts a Go map's keys, [`number`]
//! formats floats, and [`emit`] lays out a tree of [`Scalar`]s. Pinned to go.yaml.in/yaml/v4 at
//! v4.0.0-rc.4 and rc.6 ([`Release`]); each rule cites go-yaml's source, and the config crate's and
//! the factory crate's oracle tests compare the output with go-yaml itself.

pub mod emit;
pub mod examples;
pub mod number;
pub mod order;
pub mod quote;
mod resolve;
pub mod style;

pub use emit::{Node, Release, Scalar, emit, emit_entries};
pub use style::{
    Style, YAML_1_1_BOOLS, bare_string_node_style, inline, quoted_for_yaml_1_1, string_style,
};
