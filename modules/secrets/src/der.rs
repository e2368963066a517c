//! Just enough DER to build certificates the way Go's crypto/x509 lays them out and to unwrap
//! PKCS#8 key containers. Anything richer is read with x509-parser.

pub const TAG_INTEGER: u8 = 0x02;
pub const TAG_BIT_STRING: u8 = 0x03;
pub const TAG_OCTET_STRING: u8 = 0x04;
pub const TAG_UTF8_STRING: u8 = 0x0c;
pub const TAG_PRINTABLE_STRING: u8 = 0x13;
pub const TAG_UTC_TIME: u8 = 0x17;
pub const TAG_GENERALIZED_TIME: u8 = 0x18;
pub const TAG_SEQUENCE: u8 = 0x30;
pub const TAG_SET: u8 = 0x31;

/// Encodes one tag-length-value element (definite length, as DER requires).
pub fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(content.len() + 6);
    out.push(tag);
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}

pub fn seq(parts: &[&[u8]]) -> Vec<u8> {
    tlv(TAG_SEQUENCE, &parts.concat())
}

/// A non-negative INTEGER from big-endian magnitude bytes, minimally encoded.
pub fn uint(magnitude: &[u8]) -> Vec<u8> {
    let skip = magnitude.iter().take_while(|b| **b == 0).count();
    let mut content = Vec::with_capacity(magnitude.len() + 1);
    let significant = &magnitude[skip..];
    if significant.first().is_none_or(|b| b & 0x80 != 0) {
        content.push(0);
    }
    content.extend_from_slice(significant);
    tlv(TAG_INTEGER, &content)
}

/// A BIT STRING with no unused bits.
pub fn bit_string(bytes: &[u8]) -> Vec<u8> {
    let mut content = Vec::with_capacity(bytes.len() + 1);
    content.push(0);
    content.extend_from_slice(bytes);
    tlv(TAG_BIT_STRING, &content)
}

/// Reads one element; returns (tag, content, rest). Only the definite-length forms DER allows.
pub fn read(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | *b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// Reads one element and insists on its tag.
pub fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    match read(input)? {
        (t, content, rest) if t == tag => Some((content, rest)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lengths_round_trip() {
        let content = vec![7u8; 300];
        let encoded = tlv(TAG_OCTET_STRING, &content);
        assert_eq!(&encoded[..4], &[0x04, 0x82, 0x01, 0x2c]);
        let (tag, body, rest) = read(&encoded).unwrap();
        assert_eq!((tag, body, rest.len()), (TAG_OCTET_STRING, &content[..], 0));
    }

    #[test]
    fn integers_are_minimal_and_positive() {
        assert_eq!(uint(&[0, 0, 0x7f]), vec![0x02, 0x01, 0x7f]);
        assert_eq!(uint(&[0x80]), vec![0x02, 0x02, 0x00, 0x80]);
        assert_eq!(uint(&[0, 0]), vec![0x02, 0x01, 0x00]);
    }

    #[test]
    fn truncated_input_is_rejected() {
        assert!(read(&[0x30, 0x05, 0x01]).is_none());
        assert!(read(&[0x30, 0x85, 0, 0, 0, 0, 1]).is_none());
        assert!(read(&[]).is_none());
    }
}
