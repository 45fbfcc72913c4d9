//! Live queryable state: a running job answers HTTP requests for one key's
//! state (`--query-addr`), read in place on the keyed operator instance
//! that owns the key, across every tier, and routed across the processes
//! of a consumer group (Kafka Streams' Interactive Queries, which this
//! follows: a member advertises its address, and any member answers any
//! key by asking the owner).
//!
//! **What a query sees: read-uncommitted.** An answer is the key's state as
//! of the records its instance has processed so far, between two of its
//! record batches: every record of the key up to the source position the
//! answer reports (`as_of.positions`, per split: a file's record count, a
//! Kafka partition's next offset) has been applied, none after it. Until
//! checkpoint `as_of.checkpoint + 1` completes, that state is not durable:
//! after a crash the job restarts from its last completed checkpoint and
//! replays the records after it, so for a moment a reader may see an
//! older state than it saw before the crash, and then the same states
//! again, in the same order (the output after a crash equals the output
//! without one, and so do the states the replay passes through).
//! Elements whose event-time TTL has passed at the instance's watermark
//! (`as_of.watermark`) are never returned. A read never moves the key
//! between tiers (no promotion to L1, nothing marked dirty).
//!
//! * [`QueryableStates`] says how a job's keys are given (field by field,
//!   as `strata state get` takes them) and how its states print as JSON
//!   ([`QueryJson`]; serde types print as themselves).
//! * [`QueryService`] serves `GET /state/<state>/<key fields…>` and
//!   `GET /jobs/current` on an address of its own (see `query::server`).

mod answer;
pub mod client;
pub mod connections;
mod group;
mod registry;
mod request;
mod server;
mod spec;

pub(crate) use answer::{AsOf, StateQuery};
pub(crate) use group::{advertise, GroupRoute};
pub use registry::QueryService;
pub(crate) use registry::{Registration, ShardQueries};
pub use spec::{QueryJson, QueryableStates};
pub use strata_connectors::kafka::Partitioner;

/// Queries waiting for one keyed operator instance, at most: one more is
/// refused with 503 and `Retry-After` (a bounded queue, never an unbounded
/// one). The instance answers up to this many between two record batches.
pub const QUEUE_PER_INSTANCE: usize = 64;
