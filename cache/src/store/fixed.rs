//! What a store checks when it opens and when a handle is first taken:
//! the properties fixed for the state's life, and each state's type.

use super::StateStore;
use crate::descriptor::StateKind;
use crate::error::{Result, StateError};
use crate::schema::TypeSchema;
use crate::tiers::{EncodeFn, StateMeta};
use std::any::TypeId;

impl StateStore {
    /// The state `name` as a `kind` of `T`: checks its declaration, and the
    /// first time also the schema of its type against the schemas stored
    /// with it (see [`crate::schema`]).
    pub(super) fn register<T: 'static>(
        &self,
        name: &str,
        kind: StateKind,
        encode: EncodeFn,
        schema: fn() -> Result<TypeSchema>,
    ) -> Result<u16> {
        let states = &self.tiers.states;
        let id = states
            .iter()
            .position(|m| m.desc.name == name)
            .ok_or_else(|| StateError::UnknownState(name.to_owned()))?;
        let meta = &states[id];
        if meta.desc.kind != kind {
            return Err(StateError::WrongKind {
                name: name.to_owned(),
                declared: meta.desc.kind.label(),
                requested: kind.label(),
            });
        }
        if meta.encoder.get().is_none() {
            self.check_schema(meta, &schema()?)?;
        }
        let requested = std::any::type_name::<T>();
        let (type_id, used, _) = meta
            .encoder
            .get_or_init(|| (TypeId::of::<T>(), requested, encode));
        if *type_id != TypeId::of::<T>() {
            return Err(StateError::WrongKind {
                name: name.to_owned(),
                declared: used,
                requested,
            });
        }
        Ok(id as u16)
    }

    /// Records, on first open, the properties fixed for the state's life —
    /// the number of key groups, the codec version, each state's kind —
    /// in L2's default column family, and refuses to open L2 (a restored
    /// checkpoint included) written with other ones: with other key groups
    /// its keys would be looked up elsewhere and read as absent; with
    /// another kind or codec its bytes would be misread. (Value types are
    /// checked per state when a handle is first taken; see [`crate::schema`].)
    pub(super) fn check_fixed_properties(&self) -> Result<()> {
        let path = self.tiers.path.display();
        let ours = self.tiers.max_parallelism;
        if let Some(theirs) = self.fixed(b"strata.max-parallelism", &ours.to_be_bytes())? {
            let theirs = be_u32(&theirs);
            return Err(StateError::Config(format!(
                "the state in {path} was written with max parallelism {theirs} (key groups), not {ours}: open it with .max_parallelism({theirs})"
            )));
        }
        let codec = crate::codec::CODEC_VERSION;
        if let Some(theirs) = self.fixed(b"strata.codec-version", &codec.to_be_bytes())? {
            return Err(StateError::Config(format!(
                "the state in {path} was written in codec version {}; this strata reads version {codec} (restore it with the strata that wrote it, or start the job afresh)",
                be_u32(&theirs)
            )));
        }
        for s in &self.tiers.states {
            let key = format!("strata.kind.{}", s.desc.name);
            let ours = s.desc.kind.label();
            if let Some(theirs) = self.fixed(key.as_bytes(), ours.as_bytes())? {
                return Err(StateError::Config(format!(
                    "state '{}' in {path} was written as a {}, but is declared as a {ours}",
                    s.desc.name,
                    String::from_utf8_lossy(&theirs)
                )));
            }
        }
        Ok(())
    }

    /// The value L2 recorded for fixed property `key` when it differs from
    /// `ours`; records `ours` if there is none yet.
    fn fixed(&self, key: &[u8], ours: &[u8]) -> Result<Option<Vec<u8>>> {
        let db = &self.tiers.l2.db;
        match db.get(key)? {
            None => {
                db.put(key, ours)?;
                Ok(None)
            }
            Some(theirs) if theirs == ours => Ok(None),
            Some(theirs) => Ok(Some(theirs)),
        }
    }

    /// Checks `declared` against the schemas stored with the state, records
    /// it if new, and notes how old values decode.
    fn check_schema(&self, meta: &StateMeta, declared: &TypeSchema) -> Result<()> {
        let db = &self.tiers.l2.db;
        let key = crate::schema::history_key(&meta.desc.name);
        let corrupt = |e: serde_json::Error| StateError::Corrupt {
            state: meta.desc.name.clone(),
            reason: format!("unreadable schema history: {e}"),
        };
        let history: Vec<TypeSchema> = match db.get(&key)? {
            Some(raw) => serde_json::from_slice(&raw).map_err(corrupt)?,
            None => Vec::new(),
        };
        let (pad, record) = crate::schema::check(&meta.desc.name, &history, declared)?;
        if record {
            let mut history = history;
            history.push(declared.clone());
            db.put(&key, serde_json::to_vec(&history).map_err(corrupt)?)?;
        }
        let _ = meta.pad.set(pad);
        Ok(())
    }
}

/// A big-endian u32 as recorded by `check_fixed_properties` (0 if it is
/// not 4 bytes long).
fn be_u32(raw: &[u8]) -> u32 {
    raw.try_into().map(u32::from_be_bytes).unwrap_or(0)
}
