//! State declarations: a name, a kind and an optional TTL.

use crate::ttl::Ttl;

/// The kind of a declared state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateKind {
    /// One value per key.
    Value,
    /// An append-only list per key.
    List,
    /// A map per key.
    Map,
}

impl StateKind {
    pub(crate) fn label(self) -> &'static str {
        match self {
            StateKind::Value => "ValueState",
            StateKind::List => "ListState",
            StateKind::Map => "MapState",
        }
    }
}

/// Declares a named state: its kind and optional TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDescriptor {
    /// The state's name (RocksDB column families of that name hold it).
    pub name: String,
    /// Value, list or map.
    pub kind: StateKind,
    /// Expiry, if any.
    pub ttl: Option<Ttl>,
}

impl StateDescriptor {
    fn new(name: &str, kind: StateKind) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            ttl: None,
        }
    }

    /// A `ValueState` named `name`.
    pub fn value(name: &str) -> Self {
        Self::new(name, StateKind::Value)
    }

    /// A `ListState` named `name`.
    pub fn list(name: &str) -> Self {
        Self::new(name, StateKind::List)
    }

    /// A `MapState` named `name`.
    pub fn map(name: &str) -> Self {
        Self::new(name, StateKind::Map)
    }

    /// Sets the state's time-to-live.
    pub fn with_ttl(mut self, ttl: Ttl) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Whether this is one of the runtime's own states (named `__…`,
    /// e.g. timers): kept local, never moved to L3 nor read ahead.
    pub(crate) fn is_internal(&self) -> bool {
        self.name.starts_with("__")
    }
}
