//! A compact table of any value type, as the store holds it: one per
//! state whose values are eligible ([`super::compact::eligible`]), behind
//! the object-safe [`AnyTable`], with the encoding of the entries that
//! leave it for L2 ([`SortedEntries`], written in stored-key order).

use super::compact::{CompactTable, Found, Leaving};
use std::any::Any;

/// A compact table of any value type, as the store holds it (one per
/// state whose values are eligible).
pub(crate) trait AnyTable: Send + Sync {
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn bytes(&self) -> u64;
    fn len(&self) -> usize;
    fn contains(&self, hash: u64, key: &[u8]) -> bool;
    fn remove(&mut self, hash: u64, key: &[u8]) -> bool;
    /// Evicts entries by CLOCK until at most `len` remain and shrinks the
    /// array to fit them, passing the dirty ones to `f`.
    fn shrink_to(&mut self, len: usize, f: &mut EncodedSink<'_>) -> crate::Result<()>;
    /// Encodes every dirty entry into `out` (for a state of `max_parallelism`
    /// key groups).
    fn write_dirty(&self, out: &mut SortedEntries) -> crate::Result<()>;
    /// A copy holding the dirty entries (this table marked clean), or
    /// `None` if none is dirty.
    fn snapshot(&mut self) -> Option<Box<dyn AnyTable>>;
    /// The encoded entry (`[write time][postcard value]`) of (`hash`,
    /// `key`) if the table holds it dirty.
    fn dirty_entry(&self, hash: u64, key: &[u8]) -> Option<crate::Result<Vec<u8>>>;
}

/// Encoded entries — stored key, and `[write time][postcard value]` —
/// gathered in one arena and written in stored-key order (the order
/// RocksDB's memtable takes fastest).
#[derive(Default)]
pub(crate) struct SortedEntries {
    arena: Vec<u8>,
    /// (key prefix, start, key length, value length).
    items: Vec<(u128, u32, u32, u32)>,
}

impl SortedEntries {
    /// Adds the entry of `key` in `key_group` written at `ts`, whose value
    /// `encode` appends to the arena.
    pub(crate) fn push(
        &mut self,
        key_group: u16,
        key: &[u8],
        ts: i64,
        encode: impl FnOnce(&mut Vec<u8>) -> crate::Result<()>,
    ) -> crate::Result<()> {
        let start = self.arena.len();
        crate::codec::put_stored_key(&mut self.arena, key_group, key);
        let klen = self.arena.len() - start;
        self.arena.extend_from_slice(&ts.to_be_bytes());
        encode(&mut self.arena)?;
        let vlen = self.arena.len() - start - klen;
        let mut p = [0; 16];
        let n = klen.min(16);
        p[..n].copy_from_slice(&self.arena[start..start + n]);
        self.items.push((
            u128::from_be_bytes(p),
            start as u32,
            klen as u32,
            vlen as u32,
        ));
        Ok(())
    }

    /// The entries as (stored key, value), in stored-key order.
    pub(crate) fn sorted(&mut self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        let arena = &self.arena;
        let key = |&(_, at, k, _): &(u128, u32, u32, u32)| &arena[at as usize..(at + k) as usize];
        self.items
            .sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| key(a).cmp(key(b))));
        self.items.iter().map(move |&(_, at, k, v)| {
            let (at, k, v) = (at as usize, k as usize, v as usize);
            (&arena[at..at + k], &arena[at + k..at + k + v])
        })
    }

    /// Entries added.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Bytes of values added.
    pub(crate) fn value_bytes(&self) -> u64 {
        self.items.iter().map(|i| u64::from(i.3)).sum()
    }
}

/// Receives encoded entries leaving a table: (key group, key, write time,
/// postcard bytes of the value).
pub(crate) type EncodedSink<'a> = dyn FnMut(u16, &[u8], i64, &[u8]) -> crate::Result<()> + 'a;

/// A compact table with the state name its errors carry.
pub(crate) struct Table<T> {
    pub(crate) name: String,
    pub(crate) table: CompactTable<T>,
}

impl<T: serde::Serialize + Clone + Send + Sync + 'static> Table<T> {
    /// Encodes an entry leaving the table and passes it on.
    pub(crate) fn encoded<'a, 'b: 'a>(
        name: &'a str,
        f: &'a mut EncodedSink<'b>,
    ) -> impl FnMut(Leaving<'_, T>) -> crate::Result<()> + use<'a, 'b, T> {
        move |e| {
            f(
                e.key_group,
                e.key,
                e.ts,
                &crate::codec::encode(name, e.value)?,
            )
        }
    }
}

impl<T: serde::Serialize + Clone + Send + Sync + 'static> AnyTable for Table<T> {
    fn write_dirty(&self, out: &mut SortedEntries) -> crate::Result<()> {
        self.table.for_each_dirty(&mut |e| {
            out.push(e.key_group, e.key, e.ts, |buf| {
                postcard::to_extend(e.value, std::mem::take(buf))
                    .map(|filled| *buf = filled)
                    .map_err(|source| crate::StateError::Codec {
                        state: self.name.clone(),
                        action: "encode",
                        source,
                    })
            })
        })
    }
    fn snapshot(&mut self) -> Option<Box<dyn AnyTable>> {
        (self.table.dirty() > 0).then(|| {
            Box::new(Table {
                name: self.name.clone(),
                table: self.table.snapshot(),
            }) as Box<dyn AnyTable>
        })
    }
    fn dirty_entry(&self, hash: u64, key: &[u8]) -> Option<crate::Result<Vec<u8>>> {
        let (ts, value) = self.table.dirty_entry(hash, key)?;
        Some(
            crate::codec::encode(&self.name, value)
                .map(|body| crate::codec::encode_entry(ts, &body)),
        )
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn bytes(&self) -> u64 {
        self.table.bytes()
    }
    fn len(&self) -> usize {
        self.table.len()
    }
    fn contains(&self, hash: u64, key: &[u8]) -> bool {
        matches!(self.table.find(hash, key), Found::At(_))
    }
    fn remove(&mut self, hash: u64, key: &[u8]) -> bool {
        self.table.remove(hash, key)
    }
    fn shrink_to(&mut self, len: usize, f: &mut EncodedSink<'_>) -> crate::Result<()> {
        let mut spill = Self::encoded(&self.name, f);
        while self.table.len() > len {
            self.table.evict_one(&mut spill)?;
        }
        let slots = CompactTable::<T>::slots_for(len);
        if slots < self.table.slot_count() {
            self.table = self.table.resized(slots);
        }
        Ok(())
    }
}
