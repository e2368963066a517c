//! Container image references as a machine config holds them (`machine.install.image`, the
//! Kubernetes component images): checked before they are rendered, so a README placeholder or a
//! typo fails at once instead of at install or upgrade time.
//!
//! The grammar is the OCI distribution reference's: `[host[:port]/]path[:tag][@digest]`, path
//! components lowercase, a tag of at most 128 characters, a digest `algorithm:hex`.

use crate::error::{Error, ErrorKind, Result};

/// Checks `image`; the error ([`ErrorKind::InvalidImage`]) says what is wrong and what a good
/// reference looks like.
pub fn check_reference(image: &str) -> Result<()> {
    why_not(image).map_err(|why| Error::new(ErrorKind::InvalidImage, why))
}

/// Splits an image reference into repository and tag (the digest, if any, is dropped): the last
/// `:` after the last `/` starts the tag, so a registry port (`localhost:5000/x`) stays in the
/// repository.
pub fn split_image(image: &str) -> (&str, Option<&str>) {
    let no_digest = image.split('@').next().unwrap_or(image);
    let name_start = no_digest.rfind('/').map_or(0, |i| i + 1);
    match no_digest[name_start..].rfind(':') {
        Some(i) => (
            &no_digest[..name_start + i],
            Some(&no_digest[name_start + i + 1..]),
        ),
        None => (no_digest, None),
    }
}

/// What is wrong with `image` as a reference, if anything.
fn why_not(image: &str) -> std::result::Result<(), String> {
    let example = "such as ghcr.io/siderolabs/installer:v1.13.9 or factory.talos.dev/installer/SCHEMATIC:v1.13.9";
    let image = image.trim();
    if image.is_empty() {
        return Err(format!("the image reference is empty; write one {example}"));
    }
    if let Some(c) = image.chars().find(|c| "<>{}".contains(*c)) {
        return Err(format!(
            "{image:?} holds a placeholder ({c:?}): put the real value there (for an Image Factory \
             installer, the 64-hex schematic ID the factory gave you)"
        ));
    }
    if image.contains("://") || image.chars().any(char::is_whitespace) {
        return Err(format!(
            "{image:?} is not an image reference; write one {example}"
        ));
    }
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    if let Some(digest) = digest {
        let ok = digest.split_once(':').is_some_and(|(alg, hex)| {
            !alg.is_empty()
                && alg
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && hex.len() >= 32
                && hex.bytes().all(|b| b.is_ascii_hexdigit())
        });
        if !ok {
            return Err(format!(
                "{image:?} has an invalid digest {digest:?}; a digest looks like sha256:<64 hex digits>"
            ));
        }
    }
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    let (repository, tag) = match name[last_slash..].rfind(':') {
        Some(i) => (&name[..last_slash + i], Some(&name[last_slash + i + 1..])),
        None => (name, None),
    };
    if let Some(tag) = tag {
        let valid = !tag.is_empty()
            && tag.len() <= 128
            && tag
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            && tag
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
        if !valid {
            return Err(format!(
                "{image:?} has an invalid tag {tag:?}; a tag is letters, digits, '_', '.' and '-' (e.g. v1.13.9)"
            ));
        }
    }
    let mut components = repository.split('/').peekable();
    let first = components.next().unwrap_or_default();
    let is_host = components.peek().is_some()
        && (first.contains('.') || first.contains(':') || first == "localhost");
    if is_host {
        let (host, port) = first.split_once(':').unwrap_or((first, ""));
        let host_ok = !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
        let port_ok =
            port.is_empty() || (port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit()));
        if !host_ok || !port_ok {
            return Err(format!("{image:?} has an invalid registry host {first:?}"));
        }
    } else if !path_component_ok(first) {
        return Err(bad_component(image, first));
    }
    for component in components {
        if !path_component_ok(component) {
            return Err(bad_component(image, component));
        }
    }
    Ok(())
}

/// A path component: lowercase letters and digits, joined by single `.`, `_`, `__` or dashes.
fn path_component_ok(c: &str) -> bool {
    let bytes = c.as_bytes();
    !c.is_empty()
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && c.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
}

fn bad_component(image: &str, component: &str) -> String {
    format!(
        "{image:?} has an invalid path component {component:?}; repository paths are lowercase \
         letters, digits and '.', '_' or '-' between them"
    )
}

#[cfg(test)]
mod tests {
    use super::check_reference;

    #[test]
    fn real_references_pass() {
        for image in [
            "ghcr.io/siderolabs/installer:v1.13.9",
            "factory.talos.dev/installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.13.9",
            "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.0-rc.1",
            "registry.local:5000/talos/installer:v1.13.9",
            "localhost/installer:dev",
            "installer",
            "ghcr.io/siderolabs/installer@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "ghcr.io/siderolabs/kubelet:v1.36.3-fat",
        ] {
            assert!(check_reference(image).is_ok(), "{image}");
        }
    }

    #[test]
    fn placeholders_and_typos_fail_with_what_to_write() {
        let e = check_reference("factory.talos.dev/installer/<schematic>:v1.13.6")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("placeholder") && e.contains("schematic ID"),
            "{e}"
        );
        for (image, says) in [
            ("", "empty"),
            (
                "https://ghcr.io/siderolabs/installer:v1.13.9",
                "not an image reference",
            ),
            (
                "ghcr.io/SideroLabs/installer:v1.13.9",
                "invalid path component",
            ),
            ("ghcr.io/siderolabs/installer:", "invalid tag"),
            (
                "ghcr.io/siderolabs/installer:v1.13.9@sha256:xyz",
                "invalid digest",
            ),
            ("ghcr.io//installer:v1", "invalid path component"),
        ] {
            let e = check_reference(image).unwrap_err().to_string();
            assert!(e.contains(says), "{image:?}: {e}");
        }
    }
}
