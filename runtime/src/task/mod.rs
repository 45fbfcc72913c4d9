//! The three kinds of task a pipeline runs: the source, keyed operator
//! instances and sink instances. Each is a tokio task connected to its
//! neighbours by bounded edges (see [`crate::channel`]).

pub(crate) mod corruption;
pub(crate) mod dead_letter;
pub(crate) mod input;
pub(crate) mod keyed;
pub(crate) mod sink;
pub(crate) mod source;

use crate::checkpoint::Ack;
use crate::progress::Progress;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

/// What every task of a run shares with the run: where its
/// acknowledgements go (the checkpoint coordinator), the id of the newest
/// completed checkpoint (the restored one at start), and the run's counters.
#[derive(Clone)]
pub(crate) struct Links {
    pub(crate) acks: mpsc::Sender<Ack>,
    pub(crate) completed: watch::Receiver<u64>,
    pub(crate) progress: Arc<Progress>,
}
