//! Ansible's binary-module protocol.
//!
//! Reads the args file named by argv[1], validates it against a typed spec, and prints exactly one
//! JSON result with every secret masked. The only crate that writes a module's stdout.
