//! The chunk log of list states: how list writes reach L2 at the cost of a
//! memory copy and a share of one large sequential write.
//!
//! Each write batch becomes, per list state and key group, one **chunk**:
//! that batch's list operations sorted by key, one record per key (its
//! appends joined, or a replace and the appends after it), with its
//! elements' oldest and newest write times. A chunk is one value of the
//! state's chunk column family under `[key group: u16 BE][sequence: u64
//! BE]` (so a key group's chunks are contiguous, and a range of key groups
//! is a range of keys), stored in a blob file (see
//! [`super::options::chunk_cf_options`]).
//!
//! Chunks are **folded** into the per-key list values — one RocksDB merge
//! operand per key, holding all of that key's elements in the chunks —
//! when a read of a list of the key group needs them, and by the writer
//! once a key group holds [`FOLD_AT`] chunks. A chunk whose newest element
//! has expired, and which replaces no list, is deleted whole.
//!
//! The **directory** lists each key group's chunks in order. It lives in
//! memory and, per key group, in L2's default column family (written in
//! the same `WriteBatch` as the chunks it lists), so every RocksDB
//! checkpoint carries it. Its lock orders the writer's commits against
//! reads: a read holds it while it folds and reads, so a batch is seen
//! either pending or folded, never twice.
//!
//! Chunk layout: `[version: u8 = 1][flags: u8 (1 = has a replace)][oldest:
//! i64 BE][newest: i64 BE][records: u32 BE]`, then per record `[stored key
//! length: u32 BE][stored key][op: u8 (0 append, 1 replace)][length: u32
//! BE][list bytes]`.

use super::batch::Op;
use crate::codec;
use crate::error::{Result, StateError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Chunks a key group holds before the writer folds them.
pub(crate) const FOLD_AT: usize = 64;

const VERSION: u8 = 1;
const HEADER: usize = 1 + 1 + 8 + 8 + 4;

/// One chunk as the directory lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ChunkMeta {
    pub(crate) seq: u64,
    pub(crate) oldest: i64,
    pub(crate) newest: i64,
    pub(crate) replaces: bool,
}

/// The chunk CF key of chunk `seq` of `key_group`.
pub(crate) fn chunk_key(key_group: u16, seq: u64) -> [u8; 10] {
    let mut k = [0; 10];
    k[..2].copy_from_slice(&key_group.to_be_bytes());
    k[2..].copy_from_slice(&seq.to_be_bytes());
    k
}

/// The default-CF key of the directory of (`state`, `key_group`).
pub(crate) fn directory_key(state: u16, key_group: u16) -> Vec<u8> {
    let mut k = DIRECTORY_PREFIX.to_vec();
    k.extend_from_slice(&state.to_be_bytes());
    k.extend_from_slice(&key_group.to_be_bytes());
    k
}

/// Prefix of the directory's keys in the default column family.
pub(crate) const DIRECTORY_PREFIX: &[u8] = b"strata.chunks/";
/// The default-CF key of the next chunk sequence number.
pub(crate) const SEQ_KEY: &[u8] = b"strata.chunk-seq";

/// See the module docs.
#[derive(Default)]
pub(crate) struct Directory {
    pub(crate) chunks: BTreeMap<(u16, u16), Vec<ChunkMeta>>,
    pub(crate) next_seq: u64,
}

impl Directory {
    /// The directory as L2's default column family holds it.
    pub(crate) fn load(db: &rocksdb::DB) -> Result<Self> {
        let mut dir = Self::default();
        if let Some(raw) = db.get(SEQ_KEY)? {
            dir.next_seq = codec::decode("(chunk log)", &raw)?;
        }
        let mut it = db.raw_iterator();
        it.seek(DIRECTORY_PREFIX);
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            let Some(rest) = k.strip_prefix(DIRECTORY_PREFIX) else {
                break;
            };
            let corrupt = || StateError::Corrupt {
                state: "(chunk log)".into(),
                reason: "a directory key of the wrong length".into(),
            };
            let ids: [u8; 4] = rest.try_into().map_err(|_| corrupt())?;
            let state = u16::from_be_bytes([ids[0], ids[1]]);
            let kg = u16::from_be_bytes([ids[2], ids[3]]);
            dir.chunks
                .insert((state, kg), codec::decode("(chunk log)", v)?);
            it.next();
        }
        it.status()?;
        Ok(dir)
    }

    /// Chunks of (`state`, `key_group`), oldest first.
    pub(crate) fn of(&self, state: u16, key_group: u16) -> &[ChunkMeta] {
        self.chunks
            .get(&(state, key_group))
            .map_or(&[], Vec::as_slice)
    }

    /// Records the directory entry of (`state`, `key_group`) in `batch`.
    pub(crate) fn persist(
        &self,
        batch: &mut rocksdb::WriteBatch,
        state: u16,
        key_group: u16,
    ) -> Result<()> {
        let key = directory_key(state, key_group);
        match self.chunks.get(&(state, key_group)) {
            Some(list) if !list.is_empty() => batch.put(key, codec::encode("(chunk log)", list)?),
            _ => batch.delete(key),
        }
        Ok(())
    }
}

/// Builds the chunk of one key group from its records in key order (each
/// key once: see [`records_of_key`]).
#[derive(Default)]
pub(crate) struct ChunkBuilder {
    out: Vec<u8>,
    records: u32,
    oldest: i64,
    newest: i64,
    replaces: bool,
}

impl ChunkBuilder {
    pub(crate) fn new() -> Self {
        let mut out = Vec::with_capacity(64 << 10);
        out.resize(HEADER, 0);
        Self {
            out,
            records: 0,
            oldest: i64::MAX,
            newest: i64::MIN,
            replaces: false,
        }
    }

    /// Adds the record of `stored_key`: `op` and its list bytes.
    pub(crate) fn add(&mut self, stored_key: &[u8], op: Op, list: &[u8]) -> Result<()> {
        for element in codec::list_elements("(chunk log)", list) {
            let (ts, _) = element?;
            self.oldest = self.oldest.min(ts);
            self.newest = self.newest.max(ts);
        }
        self.replaces |= op == Op::Replace;
        self.out
            .extend_from_slice(&(stored_key.len() as u32).to_be_bytes());
        self.out.extend_from_slice(stored_key);
        self.out.push(u8::from(op == Op::Replace));
        self.out
            .extend_from_slice(&(list.len() as u32).to_be_bytes());
        self.out.extend_from_slice(list);
        self.records += 1;
        Ok(())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// The chunk's bytes and its directory entry.
    pub(crate) fn finish(mut self, seq: u64) -> (Vec<u8>, ChunkMeta) {
        let meta = ChunkMeta {
            seq,
            oldest: self.oldest,
            newest: self.newest,
            replaces: self.replaces,
        };
        self.out[0] = VERSION;
        self.out[1] = u8::from(self.replaces);
        self.out[2..10].copy_from_slice(&self.oldest.to_be_bytes());
        self.out[10..18].copy_from_slice(&self.newest.to_be_bytes());
        self.out[18..22].copy_from_slice(&self.records.to_be_bytes());
        (self.out, meta)
    }
}

/// The records of a chunk: (stored key, op, list bytes).
pub(crate) fn records(chunk: &[u8]) -> impl Iterator<Item = Result<(&[u8], Op, &[u8])>> {
    let corrupt = |reason: &str| StateError::Corrupt {
        state: "(chunk log)".into(),
        reason: reason.into(),
    };
    let header_ok = chunk.len() >= HEADER && chunk[0] == VERSION;
    let mut rest = if header_ok { &chunk[HEADER..] } else { &[][..] };
    let mut failed = (!header_ok).then(|| corrupt("a chunk with an unknown header"));
    std::iter::from_fn(move || {
        if let Some(e) = failed.take() {
            return Some(Err(e));
        }
        if rest.is_empty() {
            return None;
        }
        let record = (|| {
            let klen = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
            let key = rest.get(4..4 + klen)?;
            let op = *rest.get(4 + klen)?;
            let at = 5 + klen;
            let dlen = u32::from_be_bytes(rest.get(at..at + 4)?.try_into().ok()?) as usize;
            let data = rest.get(at + 4..at + 4 + dlen)?;
            let op = if op == 1 { Op::Replace } else { Op::Append };
            Some((key, op, data, at + 4 + dlen))
        })();
        match record {
            Some((key, op, data, used)) => {
                rest = &rest[used..];
                Some(Ok((key, op, data)))
            }
            None => {
                rest = &[];
                Some(Err(corrupt("a chunk record runs past the chunk's end")))
            }
        }
    })
}

/// Joins one key's list operations (oldest first) into one record: a
/// replace and the appends after it, or all appends joined.
pub(crate) fn records_of_key<'a>(
    ops: impl Iterator<Item = (Op, &'a [u8])>,
    out: &mut Vec<u8>,
) -> Op {
    let mut op = Op::Append;
    for (o, data) in ops {
        if o == Op::Replace {
            out.clear();
            op = Op::Replace;
        }
        out.extend_from_slice(data);
    }
    op
}

/// The merge operand of one key's folded records: the replace marker
/// first if it replaces, expired elements left out.
pub(crate) fn operand(op: Op, list: &[u8], cutoff: Option<i64>) -> Vec<u8> {
    let mut out = Vec::with_capacity(list.len() + 12);
    if op == Op::Replace {
        out.extend_from_slice(&codec::list_replace_marker());
    }
    let start = out.len();
    if let Some(cutoff) = cutoff {
        if codec::trim_list_into(&mut out, Some(list), std::iter::once(list), cutoff) {
            return out;
        }
        out.truncate(start);
    }
    out.extend_from_slice(list);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_gives_back_its_records_and_times() {
        let mut b = ChunkBuilder::new();
        b.add(b"k1", Op::Append, &codec::list_of(&[(5, b"a"), (9, b"b")]))
            .unwrap();
        b.add(b"k2", Op::Replace, &codec::list_of(&[(3, b"c")]))
            .unwrap();
        let (bytes, meta) = b.finish(42);
        assert_eq!(
            meta,
            ChunkMeta {
                seq: 42,
                oldest: 3,
                newest: 9,
                replaces: true
            }
        );
        let got: Vec<_> = records(&bytes).collect::<Result<_>>().unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[1].0, got[1].1), (&b"k2"[..], Op::Replace));
        assert!(records(&bytes[..bytes.len() - 1]).any(|r| r.is_err()));
        assert!(records(b"garbage").any(|r| r.is_err()));
    }

    #[test]
    fn a_keys_ops_join_from_its_last_replace() {
        let mut out = Vec::new();
        let op = records_of_key(
            [
                (Op::Append, &b"a"[..]),
                (Op::Replace, b"b"),
                (Op::Append, b"c"),
            ]
            .into_iter(),
            &mut out,
        );
        assert_eq!((op, out.as_slice()), (Op::Replace, &b"bc"[..]));
        let trimmed = operand(
            Op::Append,
            &codec::list_of(&[(1, b"x"), (7, b"y")]),
            Some(4),
        );
        assert_eq!(trimmed, codec::list_of(&[(7, b"y")]));
    }
}
