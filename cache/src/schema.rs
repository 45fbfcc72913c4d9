//! The type schema of each state, checked whenever a store hands out a
//! state handle — so a restored checkpoint is never read with another type.
//!
//! State values are postcard bytes, which carry no field names or types: a
//! field added, two fields swapped or a signed field made unsigned would be
//! read wrongly, or fail only when a key is first read. So the first handle
//! for a state records the schema of its value type — the serde data model
//! of the type, traced with `serde-reflection` (field names, their order
//! and types, enum variants) — in L2 itself (the default column family), so
//! it travels with every checkpoint. A later handle (a restored job, a
//! reopened store) must declare the same schema, or one it can migrate to:
//!
//! * equal: nothing to do;
//! * the stored struct plus `Option` fields added at its end: old values
//!   are read with those fields `None` (postcard encodes `None` as one zero
//!   byte, appended when an old value does not decode) — the case Flink's
//!   POJO and Avro serializers migrate;
//! * anything else: [`StateError::SchemaChanged`] naming the state and
//!   both schemas.
//!
//! Every schema a state has had is kept, so values written under any of
//! them stay readable.

use crate::error::{Result, StateError};
use serde::de::DeserializeOwned;
use serde_reflection::{ContainerFormat, Format, FormatHolder, Registry, Tracer, TracerConfig};

/// The traced schema of a value type: its root format and the containers
/// it names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct TypeSchema {
    root: Format,
    registry: Registry,
}

/// How many times tracing is repeated to reach every variant of nested enums.
const TRACE_ROUNDS: usize = 64;

impl TypeSchema {
    /// Traces the schema of `T`. A type serde-reflection cannot trace (a
    /// self-describing one such as `serde_json::Value`, or a custom
    /// `Deserialize` that validates) is known by its Rust type name only.
    pub(crate) fn of<T: DeserializeOwned>() -> Result<Self> {
        let mut tracer = Tracer::new(TracerConfig::default());
        let mut root = None;
        for _ in 0..TRACE_ROUNDS {
            match tracer.trace_simple_type::<T>() {
                Ok((format, _)) => root = Some(format),
                Err(_) => {
                    return Ok(Self {
                        root: Format::TypeName(std::any::type_name::<T>().to_owned()),
                        registry: Registry::new(),
                    })
                }
            }
        }
        let mut root = root.unwrap_or(Format::Unit);
        root.normalize().unwrap_or(());
        Ok(Self {
            root,
            registry: tracer.registry_unchecked(),
        })
    }

    /// A 16-hex-digit fingerprint (XXH3 of the schema's JSON form).
    pub(crate) fn fingerprint(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&json))
    }

    /// The schema in one line, for error messages.
    pub(crate) fn describe(&self) -> String {
        let mut text = format!("{:?}", self.root);
        for (name, container) in &self.registry {
            text.push_str(&format!("; {name} = {container:?}"));
        }
        format!("{} ({text})", self.fingerprint())
    }

    /// The root struct's fields, if the root is a struct.
    fn fields(&self) -> Option<&[serde_reflection::Named<Format>]> {
        let Format::TypeName(name) = &self.root else {
            return None;
        };
        match self.registry.get(name)? {
            ContainerFormat::Struct(fields) => Some(fields),
            _ => None,
        }
    }

    /// How many `None` bytes turn a value of `old` into one of `self`:
    /// `Some(0)` if equal, `Some(k)` if `self` is `old` plus `k` `Option`
    /// fields at the end of its root struct, `None` if it cannot be migrated.
    pub(crate) fn trailing_options_since(&self, old: &TypeSchema) -> Option<usize> {
        if self == old {
            return Some(0);
        }
        let (new_fields, old_fields) = (self.fields()?, old.fields()?);
        let same_elsewhere = self.root == old.root
            && self
                .registry
                .iter()
                .filter(|(name, _)| Format::TypeName((*name).clone()) != self.root)
                .all(|(name, c)| old.registry.get(name).is_none_or(|o| o == c));
        let (head, added) = new_fields.split_at_checked(old_fields.len())?;
        (same_elsewhere
            && head == old_fields
            && !added.is_empty()
            && added.iter().all(|f| matches!(f.value, Format::Option(_))))
        .then_some(added.len())
    }
}

/// The key (in L2's default column family) of a state's schema history.
pub(crate) fn history_key(state: &str) -> Vec<u8> {
    format!("strata.schema.{state}").into_bytes()
}

/// Checks `declared` against the schemas `history` a state has had (oldest
/// first) and returns how many trailing `None` bytes old values may need
/// (0: none) and whether `declared` must be added to the history.
pub(crate) fn check(
    state: &str,
    history: &[TypeSchema],
    declared: &TypeSchema,
) -> Result<(usize, bool)> {
    let mut pad = 0;
    for old in history {
        match declared.trailing_options_since(old) {
            Some(k) => pad = pad.max(k),
            None => {
                return Err(StateError::SchemaChanged {
                    state: state.to_owned(),
                    stored: old.describe(),
                    declared: declared.describe(),
                })
            }
        }
    }
    Ok((pad, history.last() != Some(declared)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct V1 {
        date: i64,
        delay: i64,
    }
    mod added {
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        pub(crate) struct V1 {
            date: i64,
            delay: i64,
            note: Option<String>,
        }
    }
    mod swapped {
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        pub(crate) struct V1 {
            delay: i64,
            date: i64,
        }
    }
    mod unsigned {
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        pub(crate) struct V1 {
            date: u64,
            delay: i64,
        }
    }
    mod required {
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        pub(crate) struct V1 {
            date: i64,
            delay: i64,
            note: String,
        }
    }

    #[test]
    fn only_option_fields_added_at_the_end_migrate() {
        let v1 = TypeSchema::of::<V1>().unwrap();
        let history = [v1.clone()];
        assert_eq!(check("s", &history, &v1).unwrap(), (0, false));
        let added = TypeSchema::of::<added::V1>().unwrap();
        assert_eq!(check("s", &history, &added).unwrap(), (1, true));
        for other in [
            TypeSchema::of::<swapped::V1>().unwrap(),
            TypeSchema::of::<unsigned::V1>().unwrap(),
            TypeSchema::of::<required::V1>().unwrap(),
        ] {
            let e = check("s", &history, &other).unwrap_err().to_string();
            assert!(
                e.contains("state 's'") && e.contains(&v1.fingerprint()),
                "{e}"
            );
        }
    }
}
