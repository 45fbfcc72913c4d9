//! # strata-key: keys made of several fields
//!
//! The key encoding strata's state store, its connectors and its jobs
//! share, in a crate of its own so that each uses it without the others
//! (the state store pulls in RocksDB; a Kafka connector has no need of it).
//! `strata_cache::composite_key` re-exports it.
//!
//! A job keyed by a tuple of fields (a route is `(origin, destination)`)
//! must not join them with a separator: `("A-B", "C")` and `("A", "B-C")`
//! would both become `A-B-C` and share one state. [`encode`] writes each
//! field as its length (LEB128 varint) followed by its bytes, a prefix-free
//! code, so distinct tuples always give distinct keys; [`decode`] gives the
//! fields back (for tools that show a key, such as `strata state get`).
//!
//! ```
//! use strata_key::{decode, encode};
//! let a = encode(&[b"A-B", b"C"]);
//! let b = encode(&[b"A", b"B-C"]);
//! assert_ne!(a, b);
//! assert_eq!(decode(&a), Some(vec![&b"A-B"[..], &b"C"[..]]));
//! ```
//!
//! A key of a single field needs no encoding: use its bytes as they are
//! (so a migrated table's text key stays the field itself).

/// Encodes `parts` as one key: per part, its length as an unsigned LEB128
/// varint, then its bytes. The result is `sum(len + varint size)` bytes.
pub fn encode(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len() + 2).sum());
    for part in parts {
        let mut len = part.len() as u64;
        loop {
            let byte = (len & 0x7f) as u8;
            len >>= 7;
            if len == 0 {
                out.push(byte);
                break;
            }
            out.push(byte | 0x80);
        }
        out.extend_from_slice(part);
    }
    out
}

/// The parts of a key [`encode`] made, or `None` if `key` is not such a
/// key (a truncated part, an overlong length, trailing bytes).
pub fn decode(mut key: &[u8]) -> Option<Vec<&[u8]>> {
    let mut parts = Vec::new();
    while !key.is_empty() {
        let (mut len, mut shift, mut used) = (0u64, 0u32, 0usize);
        loop {
            let byte = *key.get(used)?;
            used += 1;
            len |= u64::from(byte & 0x7f).checked_shl(shift)?;
            if byte & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 63 {
                return None;
            }
        }
        let end = used.checked_add(usize::try_from(len).ok()?)?;
        parts.push(key.get(used..end)?);
        key = &key[end..];
    }
    Some(parts)
}

/// A record key for a message (errors, tools): its text if it is UTF-8, else its fields
/// if it is a composite key of UTF-8 fields, else its bytes in hex.
pub fn describe(key: &[u8]) -> String {
    if let Ok(text) = std::str::from_utf8(key) {
        if !text.chars().any(char::is_control) {
            return format!("{text:?}");
        }
    }
    let fields = decode(key).and_then(|parts| {
        parts
            .into_iter()
            .map(|p| std::str::from_utf8(p).ok().map(|t| format!("{t:?}")))
            .collect::<Option<Vec<_>>>()
    });
    match fields {
        Some(fields) => format!("({})", fields.join(", ")),
        None => key.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn distinct_tuples_never_share_a_key(
            a in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 1..4),
            b in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 1..4),
        ) {
            let ka = encode(&a.iter().map(Vec::as_slice).collect::<Vec<_>>());
            let kb = encode(&b.iter().map(Vec::as_slice).collect::<Vec<_>>());
            prop_assert_eq!(a == b, ka == kb);
            let back: Vec<Vec<u8>> = decode(&ka).unwrap().into_iter().map(<[u8]>::to_vec).collect();
            prop_assert_eq!(back, a);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&bytes);
        }
    }

    #[test]
    fn the_reported_routes_differ() {
        assert_ne!(encode(&[b"A-B", b"C"]), encode(&[b"A", b"B-C"]));
        assert_eq!(decode(&[3, b'a']), None);
    }
}
