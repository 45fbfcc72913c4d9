//! How a job's keys are given and its states print: [`QueryableStates`].

use super::request::{Params, QueryError};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;
use strata_cache::StateStore;

/// How a state's values (and a map's keys) print as JSON in query answers.
///
/// The default prints the serde form of the type, so a serde type needs
/// only `impl QueryJson for MyEvent {}`; override it to print a field
/// differently (route-history prints its dates as text).
pub trait QueryJson: Serialize {
    /// The JSON form of the value.
    fn query_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|e| Value::String(format!("unprintable: {e}")))
    }
}

macro_rules! serde_query_json {
    ($($t:ty),*) => { $(impl QueryJson for $t {})* };
}
serde_query_json!(
    i8,
    i16,
    i32,
    i64,
    u8,
    u16,
    u32,
    u64,
    f32,
    f64,
    bool,
    String,
    Vec<u8>
);

/// Turns a key given field by field into the stored key bytes.
pub(crate) type KeyOfFields = fn(&[String]) -> crate::Result<Vec<u8>>;

/// Reads one kind of state for a query.
pub(crate) trait StateReader: Send + Sync {
    /// `value`, `list` or `map`.
    fn kind(&self) -> &'static str;
    /// The key's state as JSON, `None` when no tier holds any of it live.
    fn read(
        &self,
        store: &StateStore,
        key: &[u8],
        params: &Params,
    ) -> Result<Option<Value>, QueryError>;
}

/// The states a job lets queries read, and how its keys are given.
///
/// ```
/// use strata_runtime::query::QueryableStates;
/// fn user_key(fields: &[String]) -> strata_runtime::Result<Vec<u8>> {
///     Ok(fields.concat().into_bytes())
/// }
/// let states = QueryableStates::new(&["user_id"], user_key).list::<i64>("clicks");
/// assert_eq!(states.names(), vec!["clicks"]);
/// ```
#[derive(Clone)]
pub struct QueryableStates {
    key_fields: Vec<String>,
    key_of: Option<KeyOfFields>,
    states: BTreeMap<String, Arc<dyn StateReader>>,
}

impl QueryableStates {
    /// A job whose keys are given as the fields `key_fields` (names, for
    /// errors and `/jobs/current`), turned into the stored key by `key_of`
    /// (which errs, naming what is wrong, on a wrong count or form).
    pub fn new(key_fields: &[&str], key_of: KeyOfFields) -> Self {
        Self {
            key_fields: key_fields.iter().map(|f| f.to_string()).collect(),
            key_of: Some(key_of),
            states: BTreeMap::new(),
        }
    }

    /// A job that lets no state be queried (the default of
    /// `KeyedProcessFunction::queryable_states`).
    pub fn none() -> Self {
        Self {
            key_fields: Vec::new(),
            key_of: None,
            states: BTreeMap::new(),
        }
    }

    /// Lets queries read `ListState<T>` `name`: its unexpired elements,
    /// oldest first (`?since=<event time>&limit=N` selects some).
    pub fn list<T>(self, name: &str) -> Self
    where
        T: QueryJson + DeserializeOwned + Clone + Send + Sync + 'static,
    {
        self.list_with::<T>(name, |_, v| v.query_json())
    }

    /// [`QueryableStates::list`] printing each element with `render`,
    /// which also gets the element's write timestamp (ms; the event time
    /// of the record that added it).
    pub fn list_with<T>(self, name: &str, render: fn(i64, &T) -> Value) -> Self
    where
        T: DeserializeOwned + Serialize + Clone + Send + Sync + 'static,
    {
        self.with(
            name,
            ListReader::<T> {
                name: name.to_owned(),
                render,
            },
        )
    }

    /// Lets queries read `ValueState<T>` `name`.
    pub fn value<T>(self, name: &str) -> Self
    where
        T: QueryJson + DeserializeOwned + Clone + Send + Sync + 'static,
    {
        self.with(name, ValueReader::<T>(name.to_owned(), PhantomData))
    }

    /// Lets queries read `MapState<K, V>` `name`: every entry, or one
    /// (`?entry=<map key>`, as JSON, or as text for a string key).
    pub fn map<K, V>(self, name: &str) -> Self
    where
        K: QueryJson + DeserializeOwned + Clone + Send + Sync + 'static,
        V: QueryJson + DeserializeOwned + Clone + Send + Sync + 'static,
    {
        self.with(name, MapReader::<K, V>(name.to_owned(), PhantomData))
    }

    fn with(mut self, name: &str, reader: impl StateReader + 'static) -> Self {
        self.states.insert(name.to_owned(), Arc::new(reader));
        self
    }

    /// The queryable states' names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.states.keys().map(String::as_str).collect()
    }

    /// The kind of state `name` (`value`, `list` or `map`), if queryable.
    pub fn kind_of(&self, name: &str) -> Option<&'static str> {
        self.states.get(name).map(|r| r.kind())
    }

    /// The key's fields' names.
    pub fn key_fields(&self) -> &[String] {
        &self.key_fields
    }

    pub(crate) fn reader(&self, state: &str) -> Result<Arc<dyn StateReader>, QueryError> {
        self.states.get(state).cloned().ok_or_else(|| {
            QueryError::not_found(format!(
                "no queryable state '{state}' (this job's: {})",
                self.names().join(", ")
            ))
        })
    }

    /// The stored key of `fields`.
    pub(crate) fn key(&self, fields: &[String]) -> Result<Vec<u8>, QueryError> {
        let key_of = self
            .key_of
            .ok_or_else(|| QueryError::not_found("this job lets no state be queried".into()))?;
        key_of(fields).map_err(|e| QueryError::bad_request(e.to_string()))
    }

    /// Reads state `state` of `key` from `store` as a query does.
    ///
    /// Errors: an unknown state; a read error of the store.
    pub fn read(
        &self,
        store: &StateStore,
        state: &str,
        key: &[u8],
    ) -> crate::Result<Option<Value>> {
        let reader = self
            .reader(state)
            .map_err(|e| crate::RuntimeError::Usage(e.message))?;
        reader
            .read(store, key, &Params::default())
            .map_err(|e| crate::RuntimeError::Function(e.message))
    }
}

fn store_error(e: strata_cache::StateError) -> QueryError {
    QueryError::internal(format!("reading state: {e}"))
}

struct ListReader<T> {
    name: String,
    render: fn(i64, &T) -> Value,
}

impl<T> StateReader for ListReader<T>
where
    T: DeserializeOwned + Serialize + Clone + Send + Sync + 'static,
{
    fn kind(&self) -> &'static str {
        "list"
    }

    fn read(
        &self,
        store: &StateStore,
        key: &[u8],
        p: &Params,
    ) -> Result<Option<Value>, QueryError> {
        let state = store.list_state::<T>(&self.name).map_err(store_error)?;
        let Some(items) = state.peek(key).map_err(store_error)? else {
            return Ok(None);
        };
        let since = p.since.unwrap_or(i64::MIN);
        let limit = p.limit.unwrap_or(usize::MAX);
        Ok(Some(Value::Array(
            items
                .iter()
                .filter(|(ts, _)| *ts >= since)
                .take(limit)
                .map(|(ts, v)| (self.render)(*ts, v))
                .collect(),
        )))
    }
}

struct ValueReader<T>(String, PhantomData<fn() -> T>);

impl<T> StateReader for ValueReader<T>
where
    T: QueryJson + DeserializeOwned + Clone + Send + Sync + 'static,
{
    fn kind(&self) -> &'static str {
        "value"
    }

    fn read(
        &self,
        store: &StateStore,
        key: &[u8],
        _: &Params,
    ) -> Result<Option<Value>, QueryError> {
        let state = store.value_state::<T>(&self.0).map_err(store_error)?;
        Ok(state
            .peek(key)
            .map_err(store_error)?
            .map(|v| v.query_json()))
    }
}

struct MapReader<K, V>(String, PhantomData<fn() -> (K, V)>);

impl<K, V> StateReader for MapReader<K, V>
where
    K: QueryJson + DeserializeOwned + Clone + Send + Sync + 'static,
    V: QueryJson + DeserializeOwned + Clone + Send + Sync + 'static,
{
    fn kind(&self) -> &'static str {
        "map"
    }

    fn read(
        &self,
        store: &StateStore,
        key: &[u8],
        p: &Params,
    ) -> Result<Option<Value>, QueryError> {
        let state = store.map_state::<K, V>(&self.0).map_err(store_error)?;
        if let Some(entry) = &p.entry {
            let user_key: K = serde_json::from_str(entry)
                .or_else(|_| serde_json::from_value(Value::String(entry.clone())))
                .map_err(|e| {
                    QueryError::bad_request(format!(
                        "entry={entry} is not a key of map state '{}': {e}",
                        self.0
                    ))
                })?;
            let found = state.peek(key, &user_key).map_err(store_error)?;
            return Ok(found.map(|v| v.query_json()));
        }
        let entries = state.entries(key).map_err(store_error)?;
        Ok((!entries.is_empty()).then(|| {
            Value::Array(
                entries
                    .iter()
                    .map(|(k, v)| serde_json::json!({"key": k.query_json(), "value": v.query_json()}))
                    .collect(),
            )
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_cache::StateDescriptor;

    fn one_field(fields: &[String]) -> crate::Result<Vec<u8>> {
        Ok(fields.concat().into_bytes())
    }

    #[test]
    fn value_list_and_map_states_print_through_a_query() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::builder(dir.path())
            .state(StateDescriptor::value("count"))
            .state(StateDescriptor::list("clicks"))
            .state(StateDescriptor::map("seen"))
            .open()
            .unwrap();
        let spec = QueryableStates::new(&["user"], one_field)
            .value::<u64>("count")
            .list::<String>("clicks")
            .map::<String, i64>("seen");
        let key = spec.key(&["alice".into()]).unwrap();
        store
            .value_state::<u64>("count")
            .unwrap()
            .update(&key, 3)
            .unwrap();
        let clicks = store.list_state::<String>("clicks").unwrap();
        for (ts, page) in [(10, "a"), (20, "b"), (30, "c")] {
            store.set_record_timestamp(ts);
            clicks.add(&key, page.to_owned()).unwrap();
        }
        let seen = store.map_state::<String, i64>("seen").unwrap();
        seen.put(&key, &"x".to_owned(), 1).unwrap();
        seen.put(&key, &"7".to_owned(), 2).unwrap();
        let read = |state: &str, params: Params| {
            spec.reader(state)
                .unwrap()
                .read(&store, &key, &params)
                .unwrap()
        };
        assert_eq!(read("count", Params::default()), Some(serde_json::json!(3)));
        let some = Params {
            since: Some(20),
            limit: Some(1),
            ..Params::default()
        };
        assert_eq!(read("clicks", some), Some(serde_json::json!(["b"])));
        let all = read("seen", Params::default()).unwrap();
        assert_eq!(all.as_array().map(Vec::len), Some(2), "{all}");
        // A map key given as text is tried as JSON first, then as a string.
        let entry = |e: &str| Params {
            entry: Some(e.into()),
            ..Params::default()
        };
        assert_eq!(read("seen", entry("x")), Some(serde_json::json!(1)));
        assert_eq!(read("seen", entry("\"7\"")), Some(serde_json::json!(2)));
        assert_eq!(read("seen", entry("y")), None);
        let other = spec.key(&["bob".into()]).unwrap();
        let reader = spec.reader("count").unwrap();
        assert_eq!(
            reader.read(&store, &other, &Params::default()).unwrap(),
            None
        );
        assert_eq!(spec.reader("nope").err().map(|e| e.status), Some(404));
    }
}
