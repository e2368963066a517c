//! Random names: UUIDs (boot ids, object uids) and Talos's default hostnames.

pub fn new_uuid() -> String {
    let b: [u8; 16] = rand::random();
    let h = hex::encode(b);
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// Random-looking but stable host part, as Talos's default `talos-xxx-yyy` names.
pub(super) fn default_hostname(index: usize) -> String {
    let b: [u8; 2] = rand::random();
    format!("talos-{}-{}", index + 1, hex::encode(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_random_version_4_in_the_usual_form() {
        let u = new_uuid();
        assert_eq!(u.len(), 36, "{u}");
        for (i, c) in u.char_indices() {
            match i {
                8 | 13 | 18 | 23 => assert_eq!(c, '-', "{u}"),
                14 => assert_eq!(c, '4', "{u}"),
                19 => assert_eq!(c, 'a', "{u}"),
                _ => assert!(matches!(c, '0'..='9' | 'a'..='f'), "{u}"),
            }
        }
        assert_ne!(new_uuid(), new_uuid());
    }

    #[test]
    fn default_hostnames_count_from_one_with_a_random_suffix() {
        let h = default_hostname(2);
        let suffix = h.strip_prefix("talos-3-").expect(&h);
        assert_eq!(suffix.len(), 4, "{h}");
        assert!(suffix.chars().all(|c| c.is_ascii_hexdigit()), "{h}");
    }
}
