//! The clock hand of cold eviction: which L2 keys are cold.

use super::ColdEviction;
use crate::codec;
use crate::descriptor::StateKind;
use crate::error::Result;
use crate::hash::{hash_key, l1_hash, put_l1_key, KeyBytes};
use crate::l1::L1;
use crate::l2::access::AccessBits;
use crate::l2::L2;
use crate::sync::lock;
use std::collections::HashSet;

/// Picked keys: (L1 key, bytes at the barrier).
pub(super) type Picked = Vec<(Vec<u8>, Vec<u8>)>;

/// The L1 key of an L2 entry of `state` under stored key `stored`.
pub(super) fn l1_key_of(state: u16, stored: &[u8]) -> Option<Vec<u8>> {
    let (kg, key, suffix) = codec::split_stored_key(stored)?;
    let mut buf = Vec::with_capacity(stored.len() + crate::hash::L1_HEADER);
    put_l1_key(
        &mut buf,
        l1_hash(hash_key(key), state, suffix),
        state,
        kg,
        key,
        suffix,
    );
    Some(buf)
}

impl ColdEviction {
    /// Sweeps the clock hand over L2 until `target` bytes of keys that moka
    /// does not hold are picked. A key used since the hand last passed is
    /// spared once (its bit cleared); the hand goes round at most twice, so
    /// the capacity holds even when every key of L2 is in use.
    pub(super) fn sweep(
        &self,
        l2: &L2,
        l1: &L1,
        access: &AccessBits,
        target: u64,
    ) -> Result<Picked> {
        for state in 0..l2.states.len() as u16 {
            if l2.states[usize::from(state)].kind == StateKind::List {
                l2.fold_all(state)?;
            }
        }
        let mut picked = Vec::new();
        let mut seen = HashSet::new();
        let mut bytes = 0u64;
        for _round in 0..2 {
            if self.sweep_round(l2, l1, access, target, (&mut picked, &mut seen, &mut bytes))? {
                break;
            }
        }
        Ok(picked)
    }

    /// One turn of the hand; true once `target` bytes are picked.
    fn sweep_round(
        &self,
        l2: &L2,
        l1: &L1,
        access: &AccessBits,
        target: u64,
        (picked, seen, bytes): (&mut Picked, &mut HashSet<Vec<u8>>, &mut u64),
    ) -> Result<bool> {
        let states = l2.states.len() as u16;
        let mut hand = lock(&self.hand);
        let (first_state, first_key) = (hand.0 % states.max(1), hand.1.clone());
        // States from the hand's onwards, then the hand's own state again
        // from its start up to the hand.
        for step in 0..=states {
            let state = (first_state + step) % states;
            // The runtime's own states (`__…`, e.g. timers) stay local:
            // a task loads them whole from L2 when it starts.
            if l2.states[usize::from(state)].is_internal() {
                continue;
            }
            let (from, until) = match step {
                0 => (first_key.as_slice(), None),
                s if s == states => (&[][..], Some(first_key.as_slice())),
                _ => (&[][..], None),
            };
            let mut it = l2.db.raw_iterator_cf(&l2.cf(state)?);
            it.seek(from);
            while let (Some(k), Some(v)) = (it.key(), it.value()) {
                if until.is_some_and(|u| k >= u) {
                    break;
                }
                if let Some(l1_key) = l1_key_of(state, k) {
                    let key = KeyBytes::new(&l1_key);
                    if !l1.contains(key)
                        && !access.second_chance(key.hash())
                        && seen.insert(l1_key.clone())
                    {
                        *bytes += (k.len() + v.len()) as u64;
                        picked.push((l1_key, v.to_vec()));
                    }
                }
                if *bytes >= target {
                    let mut next = k.to_vec();
                    next.push(0);
                    *hand = (state, next);
                    return Ok(true);
                }
                it.next();
            }
            it.status()?;
        }
        Ok(false)
    }
}
