//! L2 write batches: what the store writes to L2, gathered in memory and
//! handed to the L2 writer whole (never one write per event).
//!
//! A batch holds, in one arena, the writes of value and map entries (put
//! or delete) and the list operations (append these elements, or replace
//! the list by these), each under its L1 key. An index by the carried L1
//! hash finds a key's writes, newest first, so that reads see what a batch
//! holds until the writer has written it: the store's open batch, and the
//! batches handed over and not yet written (see [`super::writer`]).
//! Adding a write copies its bytes into the arena: no allocation per
//! write once the arena has grown.

use crate::error::Result;
use crate::hash::{KeyBytes, PassThrough};
use crate::l1::table::AnyTable;
use std::collections::HashMap;

/// A write's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// A value or map entry is these bytes.
    Put,
    /// A value or map entry is deleted.
    Delete,
    /// These elements follow the list.
    Append,
    /// The list is these elements.
    Replace,
}

/// A byte range of the arena.
#[derive(Debug, Clone, Copy)]
struct Span {
    at: u32,
    len: u32,
}

struct Entry {
    /// The L1 key (its hash, state and stored key).
    key: Span,
    data: Span,
    op: Op,
    /// The previous entry of the same hash, or `NONE`.
    prev: u32,
}

const NONE: u32 = u32::MAX;

/// See the module docs.
#[derive(Default)]
pub(crate) struct Batch {
    arena: Vec<u8>,
    entries: Vec<Entry>,
    index: HashMap<u64, u32, PassThrough>,
    /// Bytes of list elements and of values added per state (the user's
    /// bytes, for the write-amplification figures).
    user_bytes: Vec<u64>,
    /// Copies of compact tables taken at a checkpoint, by state: their
    /// dirty entries are the batch's newest writes of those keys.
    tables: Vec<(u16, Box<dyn AnyTable>)>,
    /// Whether the batch holds a checkpoint's capture of the dirty set (the
    /// first one also the writes the open batch held at the barrier; see
    /// [`super::writer::Pending::wait_below`]).
    pub(crate) captured: bool,
}

/// One list operation as read back.
pub(crate) type ListOp<'a> = (Op, &'a [u8]);

impl Batch {
    /// Bytes the batch holds (arena and entries).
    pub(crate) fn bytes(&self) -> usize {
        self.arena.len() + self.entries.len() * std::mem::size_of::<Entry>()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.tables.is_empty()
    }

    /// Adds a copy of `state`'s compact table (see [`AnyTable::snapshot`]).
    pub(crate) fn push_table(&mut self, state: u16, table: Box<dyn AnyTable>) {
        self.tables.push((state, table));
    }

    /// The compact-table copies the batch holds.
    pub(crate) fn tables(&self) -> &[(u16, Box<dyn AnyTable>)] {
        &self.tables
    }

    /// The encoded entry a compact-table copy holds dirty for `key`.
    fn table_value(&self, key: &KeyBytes) -> Option<Result<Vec<u8>>> {
        let (state, table) = self.tables.iter().find(|(s, _)| *s == key.state())?;
        let _ = state;
        let (_, record, suffix) = crate::codec::split_stored_key(key.stored())?;
        if !suffix.is_empty() {
            return None;
        }
        table.dirty_entry(key.hash(), record)
    }

    /// Bytes of list elements and values added, per state id.
    pub(crate) fn user_bytes(&self) -> &[u64] {
        &self.user_bytes
    }

    fn slice(&self, s: Span) -> &[u8] {
        &self.arena[s.at as usize..(s.at + s.len) as usize]
    }

    fn span(&mut self, bytes: &[u8]) -> Span {
        let at = self.arena.len() as u32;
        self.arena.extend_from_slice(bytes);
        Span {
            at,
            len: bytes.len() as u32,
        }
    }

    /// The newest entry of `key`.
    fn newest(&self, key: &KeyBytes) -> Option<u32> {
        let mut i = *self.index.get(&key.hash())?;
        while i != NONE {
            let e = &self.entries[i as usize];
            if self.slice(e.key) == key.bytes() {
                return Some(i);
            }
            i = e.prev;
        }
        None
    }

    /// Adds a write of `key` (`data` empty for a delete).
    pub(crate) fn push(&mut self, key: &KeyBytes, op: Op, data: &[u8]) {
        let key_span = match self.newest(key) {
            Some(i) => self.entries[i as usize].key,
            None => self.span(key.bytes()),
        };
        let prev = self.index.get(&key.hash()).copied().unwrap_or(NONE);
        let data = self.span(data);
        let state = usize::from(key.state());
        if self.user_bytes.len() <= state {
            self.user_bytes.resize(state + 1, 0);
        }
        self.user_bytes[state] += u64::from(data.len);
        self.index.insert(key.hash(), self.entries.len() as u32);
        self.entries.push(Entry {
            key: key_span,
            data,
            op,
            prev,
        });
    }

    /// The entries of `key`, newest first.
    fn of<'a>(&'a self, key: &'a KeyBytes) -> impl Iterator<Item = &'a Entry> + 'a {
        let mut i = self.newest(key).unwrap_or(NONE);
        std::iter::from_fn(move || {
            while i != NONE {
                let e = &self.entries[i as usize];
                i = e.prev;
                if self.slice(e.key) == key.bytes() {
                    return Some(e);
                }
            }
            None
        })
    }

    /// What the batch says of a value or map entry: `Some(Some(bytes))`
    /// written, `Some(None)` deleted, `None` not in this batch.
    pub(crate) fn value(&self, key: &KeyBytes) -> Option<Result<Option<Vec<u8>>>> {
        if let Some(encoded) = self.table_value(key) {
            return Some(encoded.map(Some));
        }
        let e = self.of(key).next()?;
        Some(Ok((e.op == Op::Put).then(|| self.slice(e.data).to_vec())))
    }

    /// Appends the batch's list operations of `key`, oldest first, to
    /// `out` (from its newest replace on, if it has one).
    pub(crate) fn list_ops<'a>(&'a self, key: &'a KeyBytes, out: &mut Vec<ListOp<'a>>) {
        let start = out.len();
        for e in self.of(key) {
            out.push((e.op, self.slice(e.data)));
            if e.op == Op::Replace {
                break;
            }
        }
        out[start..].reverse();
    }

    /// Whether the batch holds writes of `key`.
    pub(crate) fn holds(&self, key: &KeyBytes) -> bool {
        self.of(key).next().is_some() || self.table_value(key).is_some()
    }

    /// The writes in L1-key order (state, then stored key), each
    /// key's in the order they were made: what the writer writes.
    pub(crate) fn sorted(&self) -> Vec<Write<'_>> {
        // Sorted by a 16-byte prefix of (state, stored key) kept beside each
        // index — a cache-friendly sort; whole keys compared only on ties.
        let mut order: Vec<(u128, u32)> = (0..self.entries.len() as u32)
            .map(|i| (prefix(self.key_of(i)), i))
            .collect();
        order.sort_unstable_by(|(pa, a), (pb, b)| {
            pa.cmp(pb)
                .then_with(|| self.key_of(*a).cmp(self.key_of(*b)))
                .then(a.cmp(b))
        });
        order
            .into_iter()
            .map(|(_, i)| {
                let e = &self.entries[i as usize];
                Write {
                    key: KeyBytes::new(self.slice(e.key)),
                    op: e.op,
                    data: self.slice(e.data),
                }
            })
            .collect()
    }

    /// The L1 key of entry `i` without its hash: state, then stored key.
    fn key_of(&self, i: u32) -> &[u8] {
        &self.slice(self.entries[i as usize].key)[8..]
    }
}

/// The first 16 bytes of `key` as a big-endian number (zero-padded), so
/// that numbers compare as the keys' prefixes do.
fn prefix(key: &[u8]) -> u128 {
    let mut p = [0; 16];
    let n = key.len().min(16);
    p[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(p)
}

/// One write of a batch.
pub(crate) struct Write<'a> {
    pub(crate) key: &'a KeyBytes,
    pub(crate) op: Op,
    pub(crate) data: &'a [u8],
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::put_l1_key;

    fn key(buf: &mut Vec<u8>, state: u16, k: &[u8], hash: u64) {
        put_l1_key(buf, hash, state, 0, k, b"");
    }

    #[test]
    fn reads_see_the_newest_write_of_each_key_even_when_hashes_collide() {
        let mut b = Batch::default();
        let (mut a, mut c) = (Vec::new(), Vec::new());
        key(&mut a, 0, b"a", 7);
        key(&mut c, 0, b"c", 7);
        let (a, c) = (KeyBytes::new(&a), KeyBytes::new(&c));
        b.push(a, Op::Put, b"1");
        b.push(c, Op::Put, b"2");
        b.push(a, Op::Delete, b"");
        b.push(c, Op::Put, b"3");
        assert_eq!(b.value(a).map(Result::unwrap), Some(None));
        assert_eq!(b.value(c).map(Result::unwrap), Some(Some(b"3".to_vec())));
        let mut other = Vec::new();
        key(&mut other, 1, b"a", 7);
        assert!(b.value(KeyBytes::new(&other)).is_none());
        let sorted: Vec<_> = b
            .sorted()
            .iter()
            .map(|w| (w.key.stored().to_vec(), w.op))
            .collect();
        assert_eq!(sorted.len(), 4);
        assert_eq!(sorted[0].1, Op::Put);
        assert_eq!(sorted[1].1, Op::Delete, "a's writes in the order made");
    }

    #[test]
    fn list_ops_start_at_the_newest_replace() {
        let mut b = Batch::default();
        let mut k = Vec::new();
        key(&mut k, 2, b"k", 1);
        let k = KeyBytes::new(&k);
        b.push(k, Op::Append, b"x");
        b.push(k, Op::Replace, b"y");
        b.push(k, Op::Append, b"z");
        let mut ops = Vec::new();
        b.list_ops(k, &mut ops);
        assert_eq!(ops, vec![(Op::Replace, &b"y"[..]), (Op::Append, &b"z"[..])]);
        assert!(b.holds(k) && b.sorted().len() == 3);
    }
}
