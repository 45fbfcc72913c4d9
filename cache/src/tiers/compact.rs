//! Value state in the compact tables (see [`crate::l1::compact`]): finding,
//! inserting (growing a table while L1's budget allows, else evicting by
//! CLOCK), removing, and sending the entries that leave to L2.

use super::{Hot, Tiers};
use crate::codec;
use crate::error::Result;
use crate::hash::{hash_key, l1_hash, put_l1_key, KeyBytes};
use crate::l1::compact::{CompactTable, Found, Leaving};
use crate::l1::table::{AnyTable, Table};
use crate::l2::batch::{Batch, Op};

/// Table accesses between two touches of the ballast.
const TOUCH_EVERY: u32 = 4096;

/// The compact table of `state`, if its values live in one.
fn table_of<T: Clone + 'static>(
    tables: &mut [Option<Box<dyn AnyTable>>],
    state: u16,
) -> Option<&mut CompactTable<T>> {
    let t = tables.get_mut(usize::from(state))?.as_mut()?;
    t.as_any_mut()
        .downcast_mut::<Table<T>>()
        .map(|t| &mut t.table)
}

/// Whether a value of `state` under a record key `len` bytes long lives in
/// a compact table.
pub(crate) fn has_table(hot: &Hot, state: u16, len: usize) -> bool {
    len <= crate::l1::compact::KEY_INLINE
        && hot
            .tables
            .get(usize::from(state))
            .is_some_and(Option::is_some)
}

/// Applies `f` to the entry of `record_key` (its write time and value)
/// if the table holds it; `f` returns its result and, if it changed the
/// value, the write time that makes the entry dirty. `None` if the table
/// does not hold the key.
pub(crate) fn compact_get<T: Clone + 'static, R>(
    hot: &mut Hot,
    state: u16,
    key: &KeyBytes,
    record_key: &[u8],
    f: impl FnOnce(i64, &mut T) -> (R, Option<i64>),
) -> Option<R> {
    hot.table_ops += 1;
    let table = table_of::<T>(&mut hot.tables, state)?;
    let Found::At(pos) = table.find(key.hash(), record_key) else {
        return None;
    };
    let (ts, value) = table.get(pos)?;
    let (out, written) = f(ts, value);
    if let Some(ts) = written {
        table.set_dirty(pos, ts);
    }
    Some(out)
}

/// Puts an encoded entry leaving a compact table into the open batch.
#[allow(clippy::too_many_arguments)]
fn put_leaving(
    open: &mut Batch,
    buf: &mut Vec<u8>,
    state: u16,
    key_group: u16,
    key: &[u8],
    ts: i64,
    body: &[u8],
) {
    let hash = l1_hash(hash_key(key), state, b"");
    put_l1_key(buf, hash, state, key_group, key, b"");
    open.push(KeyBytes::new(buf), Op::Put, &codec::encode_entry(ts, body));
}

/// Encodes an entry leaving a compact table into the open batch.
fn spill(
    open: &mut Batch,
    buf: &mut Vec<u8>,
    state: u16,
    e: Leaving<'_, impl serde::Serialize>,
    name: &str,
) -> Result<()> {
    let body = codec::encode(name, e.value)?;
    put_leaving(open, buf, state, e.key_group, e.key, e.ts, &body);
    Ok(())
}

/// Inserts the entry of `record_key` (not in the table) into `state`'s
/// compact table: grows the table if L1's budget allows, else evicts one
/// entry by CLOCK (a dirty one goes to the open batch).
#[allow(clippy::too_many_arguments)]
pub(crate) fn compact_insert<T>(
    tiers: &Tiers,
    hot: &mut Hot,
    state: u16,
    key: &KeyBytes,
    record_key: &[u8],
    ts: i64,
    value: T,
    dirty: bool,
) -> Result<()>
where
    T: serde::Serialize + Clone + Send + 'static,
{
    if tiers.l1.ballast_lost() {
        shrink_all(tiers, hot)?;
    }
    if hot.table_ops >= TOUCH_EVERY {
        hot.table_ops = 0;
        tiers.l1.touch_ballast();
    }
    let others: u64 = hot
        .tables
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != usize::from(state))
        .filter_map(|(_, t)| t.as_ref().map(|t| t.bytes()))
        .sum();
    let name = tiers.name(state).to_owned();
    let Hot {
        tables,
        open,
        spill_buf,
        ..
    } = hot;
    let Some(table) = table_of::<T>(tables, state) else {
        return Ok(());
    };
    if !table.has_room() {
        let grown = table.grown_slots();
        let bytes = grown as u64 * CompactTable::<T>::slot_bytes();
        tiers.l1.settle();
        if tiers.l1.charge_tables(others + bytes) {
            *table = table.resized(grown);
        } else {
            table.evict_near(key.hash(), &mut |e| spill(open, spill_buf, state, e, &name))?;
        }
    }
    table.insert(key.hash(), key.key_group(), record_key, ts, value, dirty);
    tiers.settle(hot)
}

/// Halves every compact table (moka evicted ballast: L1 is wanted for
/// moka's entries) and charges what they keep.
fn shrink_all(tiers: &Tiers, hot: &mut Hot) -> Result<()> {
    let Hot {
        tables,
        open,
        spill_buf,
        ..
    } = hot;
    let mut total = 0;
    for (state, t) in tables.iter_mut().enumerate() {
        let Some(t) = t.as_mut() else {
            continue;
        };
        let state = state as u16;
        let keep = t.len() / 2;
        t.shrink_to(keep, &mut |kg, key, ts, body| {
            put_leaving(open, spill_buf, state, kg, key, ts, body);
            Ok(())
        })?;
        total += t.bytes();
    }
    tiers.l1.charge_tables(total);
    tiers.settle(hot)
}

/// Removes the entry of `record_key` from `state`'s compact table.
pub(crate) fn compact_remove(hot: &mut Hot, state: u16, key: &KeyBytes, record_key: &[u8]) {
    if let Some(t) = hot
        .tables
        .get_mut(usize::from(state))
        .and_then(Option::as_mut)
    {
        t.remove(key.hash(), record_key);
    }
}
