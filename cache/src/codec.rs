//! Byte layouts shared by the tiers.
//!
//! * Stored key: `[key group: u16 BE][key length: u32 BE][key][map user key]`.
//!   Keys of one key group are contiguous; within it, one record key's map
//!   entries are contiguous (a prefix scan reads one map).
//! * L1 key: `[state id: u16 BE]` followed by the stored key.
//! * Value and map-entry value: `[timestamp: i64 BE][postcard(T)]`.
//! * List value: zero or more elements `[timestamp: i64 BE][len: u32 BE][postcard(T)]`;
//!   concatenating two lists is a list.
//! * List writes reach L2 through a per-key-group chunk log
//!   (`l2::chunks`): each write batch becomes, per key group, one chunk of
//!   that batch's list operations sorted by key — *append* these elements,
//!   or *replace* the list by these — which is folded into the per-key
//!   list values (RocksDB merge operands, many elements each) later, so
//!   `ListState::add` never reads the list and costs no LSM entry of its
//!   own. A merge operand that replaces starts with the *replace marker*
//!   (an element header `[i64::MIN][u32::MAX - 1]` with no body).
//!
//! * With a cold tier (L3), two markers: a list whose value starts with the
//!   *base marker* (an element header `[i64::MIN][u32::MAX]` with no body) is
//!   complete — L3 holds nothing older of it; a list without one holds only
//!   appends made since the key last left L2, and L3 holds its beginning. A
//!   value or map entry equal to the *tombstone* says "deleted", so that an
//!   older copy in L3 is not read as current.
//!
//! Timestamps are milliseconds since the Unix epoch (event or processing time,
//! per the state's TTL domain) and drive TTL.

use crate::error::{Result, StateError};
use serde::{de::DeserializeOwned, Serialize};

/// The version of the byte layouts above. A store records it in L2 when
/// first opened and refuses L2 (a restored checkpoint included) written
/// with another version.
pub const CODEC_VERSION: u32 = 2;

const TS_LEN: usize = 8;
const LEN_LEN: usize = 4;

/// Appends the stored key of (`key_group`, `key`) to `out`.
pub fn put_stored_key(out: &mut Vec<u8>, key_group: u16, key: &[u8]) {
    out.extend_from_slice(&key_group.to_be_bytes());
    out.extend_from_slice(&(key.len() as u32).to_be_bytes());
    out.extend_from_slice(key);
}

/// Splits a stored key into (key group, record key, map user key).
pub fn split_stored_key(stored: &[u8]) -> Option<(u16, &[u8], &[u8])> {
    let kg = u16::from_be_bytes(stored.get(0..2)?.try_into().ok()?);
    let len = u32::from_be_bytes(stored.get(2..6)?.try_into().ok()?) as usize;
    let key = stored.get(6..6 + len)?;
    Some((kg, key, &stored[6 + len..]))
}

pub(crate) fn encode<T: Serialize>(state: &str, value: &T) -> Result<Vec<u8>> {
    postcard::to_stdvec(value).map_err(|source| StateError::Codec {
        state: state.to_owned(),
        action: "encode",
        source,
    })
}

pub(crate) fn decode<T: DeserializeOwned>(state: &str, bytes: &[u8]) -> Result<T> {
    postcard::from_bytes(bytes).map_err(|source| StateError::Codec {
        state: state.to_owned(),
        action: "decode",
        source,
    })
}

fn corrupt(state: &str, reason: &str) -> StateError {
    StateError::Corrupt {
        state: state.to_owned(),
        reason: reason.to_owned(),
    }
}

/// Encodes a value (or map entry) written at `ts`.
pub(crate) fn encode_entry(ts: i64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(TS_LEN + body.len());
    out.extend_from_slice(&ts.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// Splits an encoded value into (timestamp, body).
pub(crate) fn split_entry<'a>(state: &str, bytes: &'a [u8]) -> Result<(i64, &'a [u8])> {
    let ts = bytes
        .get(..TS_LEN)
        .ok_or_else(|| corrupt(state, "value shorter than its timestamp"))?;
    Ok((
        i64::from_be_bytes(ts.try_into().unwrap_or_default()),
        &bytes[TS_LEN..],
    ))
}

const MARKER_TS: i64 = i64::MIN;
const MARKER_LEN: u32 = u32::MAX;

/// The list base marker (see the module docs).
pub(crate) fn list_base_marker() -> [u8; TS_LEN + LEN_LEN] {
    let mut m = [0; TS_LEN + LEN_LEN];
    m[..TS_LEN].copy_from_slice(&MARKER_TS.to_be_bytes());
    m[TS_LEN..].copy_from_slice(&MARKER_LEN.to_be_bytes());
    m
}

/// Whether an encoded list starts with the base marker (is complete).
pub(crate) fn is_complete_list(bytes: &[u8]) -> bool {
    bytes.starts_with(&list_base_marker())
}

const REPLACE_LEN: u32 = u32::MAX - 1;

/// The replace marker of list merge operands (see the module docs).
pub(crate) fn list_replace_marker() -> [u8; TS_LEN + LEN_LEN] {
    let mut m = [0; TS_LEN + LEN_LEN];
    m[..TS_LEN].copy_from_slice(&MARKER_TS.to_be_bytes());
    m[TS_LEN..].copy_from_slice(&REPLACE_LEN.to_be_bytes());
    m
}

/// The list an operand replaces with, if it is a replacing operand.
pub(crate) fn replacing(operand: &[u8]) -> Option<&[u8]> {
    operand.strip_prefix(&list_replace_marker()[..])
}

/// The tombstone of a value or map entry (see the module docs).
pub(crate) fn tombstone() -> Vec<u8> {
    let mut t = MARKER_TS.to_be_bytes().to_vec();
    t.extend_from_slice(&MARKER_LEN.to_be_bytes());
    t
}

/// Whether an encoded value or map entry is the tombstone.
pub(crate) fn is_tombstone(bytes: &[u8]) -> bool {
    bytes.len() == TS_LEN + LEN_LEN
        && bytes.starts_with(&MARKER_TS.to_be_bytes())
        && bytes.ends_with(&MARKER_LEN.to_be_bytes())
}

/// Appends one list element written at `ts` to `out`.
pub(crate) fn put_list_element(out: &mut Vec<u8>, ts: i64, body: &[u8]) {
    out.extend_from_slice(&ts.to_be_bytes());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
}

/// The encoding of a list of `elements` (write time, encoded element), for
/// tests.
#[cfg(test)]
pub(crate) fn list_of(elements: &[(i64, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (ts, body) in elements {
        put_list_element(&mut out, *ts, body);
    }
    out
}

/// Writes the elements of `parts` written after `cutoff` into `out`, with
/// the base marker first if `base` (the first part) has one; false if a
/// part does not parse (then `out` holds part of the result).
pub(crate) fn trim_list_into<'a>(
    out: &mut Vec<u8>,
    base: Option<&[u8]>,
    parts: impl Iterator<Item = &'a [u8]>,
    cutoff: i64,
) -> bool {
    if base.is_some_and(is_complete_list) {
        out.extend_from_slice(&list_base_marker());
    }
    for part in parts {
        for element in list_elements("", part) {
            let Ok((ts, body)) = element else {
                return false;
            };
            if ts > cutoff {
                put_list_element(out, ts, body);
            }
        }
    }
    true
}

/// Iterates the (timestamp, body) elements of an encoded list.
pub(crate) fn list_elements<'a>(
    state: &'a str,
    mut bytes: &'a [u8],
) -> impl Iterator<Item = Result<(i64, &'a [u8])>> + 'a {
    std::iter::from_fn(move || {
        if bytes.is_empty() {
            return None;
        }
        let Some(head) = bytes.get(..TS_LEN + LEN_LEN) else {
            bytes = &[];
            return Some(Err(corrupt(state, "list element header truncated")));
        };
        let ts = i64::from_be_bytes(head[..TS_LEN].try_into().unwrap_or_default());
        let len = u32::from_be_bytes(head[TS_LEN..].try_into().unwrap_or_default());
        let rest = &bytes[TS_LEN + LEN_LEN..];
        if ts == MARKER_TS && (len == MARKER_LEN || len == REPLACE_LEN) {
            bytes = rest;
            return Some(Ok(None));
        }
        let len = len as usize;
        let Some(body) = rest.get(..len) else {
            bytes = &[];
            return Some(Err(corrupt(state, "list element body truncated")));
        };
        bytes = &rest[len..];
        Some(Ok(Some((ts, body))))
    })
    .filter_map(Result::transpose)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_key_round_trips_with_map_user_key() {
        let mut k = Vec::new();
        put_stored_key(&mut k, 7, b"LAS-PHL");
        k.extend_from_slice(b"user");
        assert_eq!(
            split_stored_key(&k),
            Some((7, &b"LAS-PHL"[..], &b"user"[..]))
        );
    }

    #[test]
    fn concatenated_lists_decode_as_one_list() {
        let mut a = Vec::new();
        put_list_element(&mut a, 1, b"x");
        let mut b = Vec::new();
        put_list_element(&mut b, 2, b"yz");
        a.extend_from_slice(&b);
        let got: Vec<_> = list_elements("s", &a).collect::<Result<_>>().unwrap();
        assert_eq!(got, vec![(1, &b"x"[..]), (2, &b"yz"[..])]);
    }

    #[test]
    fn base_marker_is_skipped_and_recognised() {
        let mut a = list_base_marker().to_vec();
        put_list_element(&mut a, 5, b"x");
        assert!(is_complete_list(&a));
        let got: Vec<_> = list_elements("s", &a).collect::<Result<_>>().unwrap();
        assert_eq!(got, vec![(5, &b"x"[..])]);
        assert!(is_tombstone(&tombstone()));
        assert!(!is_tombstone(&encode_entry(i64::MIN, b"")));
    }

    #[test]
    fn truncated_list_is_an_error_not_a_panic() {
        let mut a = Vec::new();
        put_list_element(&mut a, 1, b"abc");
        let got: Vec<_> = list_elements("s", &a[..a.len() - 1]).collect();
        assert!(matches!(got.last(), Some(Err(StateError::Corrupt { .. }))));
    }
}
