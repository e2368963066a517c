//! Endpoint strings as talosctl accepts them: `host`, `host:port`, `[v6]:port`,
//! bare IPv6, `https://host[:port]`. Without a port apid's 50000 is used, except
//! for an `https://` URL, which defaults to 443 as in talosctl.

use std::fmt;
use std::net::IpAddr;

use crate::error::{ClientError, ErrorKind, Result};

/// Port apid listens on.
pub const DEFAULT_PORT: u16 = 50000;

/// A parsed endpoint: the host (also the TLS server name) and the TCP port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Host name or IP literal, without brackets.
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    pub fn parse(input: &str) -> Result<Endpoint> {
        let bad = |why: &str| {
            ClientError::new(
                input,
                "parse endpoint",
                ErrorKind::InvalidEndpoint,
                format!("expected host, host:port, [ipv6]:port or https://host[:port]; {why}"),
            )
        };
        let trimmed = input.trim();
        let (rest, default_port) = if let Some(r) = trimmed.strip_prefix("https://") {
            (r, 443)
        } else if trimmed.contains("://") {
            return Err(bad("only https:// URLs are supported"));
        } else {
            (trimmed, DEFAULT_PORT)
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.is_empty() {
            return Err(bad("the host is empty"));
        }
        if rest.contains('/') {
            return Err(bad("a path is not allowed"));
        }

        let (host, port) = if let Some(inner) = rest.strip_prefix('[') {
            let (host, after) = inner
                .split_once(']')
                .ok_or_else(|| bad("missing ']' after the IPv6 address"))?;
            let port = match after {
                "" => default_port,
                p => parse_port(
                    p.strip_prefix(':')
                        .ok_or_else(|| bad("expected ':' after ']'"))?,
                )
                .ok_or_else(|| bad("the port is not a number between 1 and 65535"))?,
            };
            if host.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(bad("the bracketed host is not an IPv6 address"));
            }
            (host.to_string(), port)
        } else if rest.matches(':').count() > 1 {
            // Several colons without brackets: a bare IPv6 address, no port.
            if rest.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(bad("write IPv6 addresses with a port as [address]:port"));
            }
            (rest.to_string(), default_port)
        } else if let Some((host, port)) = rest.split_once(':') {
            let port = parse_port(port)
                .ok_or_else(|| bad("the port is not a number between 1 and 65535"))?;
            (host.to_string(), port)
        } else {
            (rest.to_string(), default_port)
        };
        if host.is_empty() {
            return Err(bad("the host is empty"));
        }
        if host.chars().any(|c| c.is_whitespace()) {
            return Err(bad("the host contains whitespace"));
        }
        Ok(Endpoint { host, port })
    }

    /// The host as an IP address, when it is one.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    /// How messages name this endpoint: the host alone on apid's usual port, else `host:port`, so
    /// that two nodes behind one address (or a forwarded port) are told apart.
    pub fn name(&self) -> String {
        if self.port == DEFAULT_PORT {
            self.host.clone()
        } else {
            self.authority()
        }
    }

    /// `host:port`, with IPv6 hosts bracketed (for URIs and messages).
    pub fn authority(&self) -> String {
        match self.ip() {
            Some(IpAddr::V6(_)) => format!("[{}]:{}", self.host, self.port),
            _ => format!("{}:{}", self.host, self.port),
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.authority())
    }
}

fn parse_port(s: &str) -> Option<u16> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<u16>().ok().filter(|p| *p != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(s: &str) -> (String, u16) {
        let e = Endpoint::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        (e.host, e.port)
    }

    #[test]
    fn accepted_forms() {
        assert_eq!(ep("10.5.0.2"), ("10.5.0.2".into(), 50000));
        assert_eq!(ep("10.5.0.2:50001"), ("10.5.0.2".into(), 50001));
        assert_eq!(ep("cp1.example.org"), ("cp1.example.org".into(), 50000));
        assert_eq!(ep("[fd00::2]:50000"), ("fd00::2".into(), 50000));
        assert_eq!(ep("[fd00::2]"), ("fd00::2".into(), 50000));
        assert_eq!(ep("fd00::2"), ("fd00::2".into(), 50000));
        assert_eq!(
            ep("https://talos.example.org"),
            ("talos.example.org".into(), 443)
        );
        assert_eq!(
            ep("https://talos.example.org:8443/"),
            ("talos.example.org".into(), 8443)
        );
        assert_eq!(ep(" 127.0.0.1 "), ("127.0.0.1".into(), 50000));
    }

    #[test]
    fn authority_brackets_ipv6() {
        assert_eq!(
            Endpoint::parse("fd00::2").unwrap().authority(),
            "[fd00::2]:50000"
        );
        assert_eq!(
            Endpoint::parse("10.0.0.1").unwrap().authority(),
            "10.0.0.1:50000"
        );
    }

    #[test]
    fn names_keep_a_port_other_than_apids() {
        assert_eq!(Endpoint::parse("10.0.0.1").unwrap().name(), "10.0.0.1");
        assert_eq!(
            Endpoint::parse("10.0.0.1:50000").unwrap().name(),
            "10.0.0.1"
        );
        assert_eq!(
            Endpoint::parse("127.0.0.1:37159").unwrap().name(),
            "127.0.0.1:37159"
        );
        assert_eq!(
            Endpoint::parse("[fd00::2]:50001").unwrap().name(),
            "[fd00::2]:50001"
        );
        assert_eq!(Endpoint::parse("fd00::2").unwrap().name(), "fd00::2");
    }

    #[test]
    fn rejected_forms_say_what_was_expected() {
        for bad in [
            "",
            "host:",
            "host:0",
            "host:70000",
            "host:abc",
            "[fd00::2",
            "[fd00::2]x",
            "[not-v6]:1",
            "http://host",
            "https://host/path",
            "a:b:c",
        ] {
            let err = Endpoint::parse(bad).expect_err(bad);
            assert_eq!(err.kind, ErrorKind::InvalidEndpoint, "{bad}");
            assert!(err.to_string().contains("expected host"), "{bad}: {err}");
        }
    }
}
