//! Strings on which go-yaml's choices are easy to get wrong, for the tests of every crate that
//! writes YAML through this one: each with how go-yaml v4.0.0-rc.6 writes it as a Go string
//! value in block context (`auto: <here>`), pinned here and checked against go-yaml itself by the
//! factory crate's oracle test (`modules/factory/tests/oracle_schematic.rs`).

/// `(text, as rc.6 writes it)`.
pub const STRINGS: &[(&str, &str)] = &[
    // Plain: nothing else reads it back.
    ("siderolabs/amd-ucode", "siderolabs/amd-ucode"),
    ("console=ttyS0,115200", "console=ttyS0,115200"),
    ("-x", "-x"),
    ("v1.2.3", "v1.2.3"),
    ("10.5.0.2", "10.5.0.2"),
    ("2024-13-45x", "2024-13-45x"),
    ("_1", "_1"),
    // Double-quoted: plain would be another type in YAML 1.2 (resolve.go).
    ("", "\"\""),
    ("10", "\"10\""),
    ("true", "\"true\""),
    ("null", "\"null\""),
    ("~", "\"~\""),
    ("1.5", "\"1.5\""),
    (".5", "\".5\""),
    ("1e5", "\"1e5\""),
    ("0x1F", "\"0x1F\""),
    ("0o17", "\"0o17\""),
    ("0777", "\"0777\""),
    ("1_000", "\"1_000\""),
    (".inf", "\".inf\""),
    // Timestamps (resolve.go's allowedTimestampFormats).
    ("2024-01-02", "\"2024-01-02\""),
    ("2024-1-2", "\"2024-1-2\""),
    (
        "2001-12-14t21:59:43.10-05:00",
        "\"2001-12-14t21:59:43.10-05:00\"",
    ),
    ("2001-12-14 21:59:43.10", "\"2001-12-14 21:59:43.10\""),
    // Single-quoted by rc.6's representer: YAML 1.1 booleans, base-60 numbers, the merge key.
    ("yes", "'yes'"),
    ("off", "'off'"),
    ("N", "'N'"),
    ("1:20", "'1:20'"),
    ("190:20:30.15", "'190:20:30.15'"),
    ("<<", "'<<'"),
    // Single-quoted: plain is refused by the emitter's analysis (indicators, `: `, ` #`).
    ("a: b", "'a: b'"),
    ("- x", "'- x'"),
    ("[::1]:50000", "'[::1]:50000'"),
    (
        "{\"externalIPs\":[\"1.2.3.4\"]}",
        "'{\"externalIPs\":[\"1.2.3.4\"]}'",
    ),
    ("it's: x", "'it''s: x'"),
    ("x #y", "'x #y'"),
    ("******", "'******'"),
    (" lead", "' lead'"),
    // Double-quoted with escapes: characters only escapes carry.
    ("a\tb", "\"a\\tb\""),
    ("a\u{1}b", "\"a\\x01b\""),
    ("a\u{85}b", "\"a\\Nb\""),
    ("\u{feff}x", "\"\\uFEFF\\x78\""),
    ("ok \u{1F600}", "\"ok \\U0001F600\""),
    ("\n", "\"\\n\""),
];
