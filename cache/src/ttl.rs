//! Time-to-live for state, in event time by default.
//!
//! A state declared with a [`Ttl`] stamps every value (and every list
//! element) with the time it was written. It is expired once
//! `written + ttl <= now`, where `now` is the current **watermark** for
//! [`TimeDomain::EventTime`] (so reprocessing 2001 data expires 2001 events)
//! or the wall clock for [`TimeDomain::ProcessingTime`]. Expiry is enforced in
//! every tier: skipped (and trimmed) on read, dropped by the RocksDB
//! compaction filter in L2. Flink's `StateTtlConfig` is the model; unlike
//! Flink's default it measures event time.

use crate::codec;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Which clock a TTL is measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeDomain {
    /// The watermark of the stream (the default).
    EventTime,
    /// The machine's wall clock.
    ProcessingTime,
}

/// A state's time-to-live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl {
    /// How long a value lives after it was written, in milliseconds.
    pub millis: i64,
    /// The clock it is measured against.
    pub domain: TimeDomain,
}

impl Ttl {
    /// A TTL measured against the watermark.
    pub fn event_time(ttl: Duration) -> Self {
        Self {
            millis: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
            domain: TimeDomain::EventTime,
        }
    }

    /// A TTL measured against the wall clock.
    pub fn processing_time(ttl: Duration) -> Self {
        Self {
            millis: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
            domain: TimeDomain::ProcessingTime,
        }
    }
}

/// The clocks a store reads: the current watermark (set by the runtime as
/// watermarks arrive) and the wall clock. Shared with the compaction filter.
#[derive(Debug)]
pub struct Clock {
    watermark: AtomicI64,
}

impl Default for Clock {
    fn default() -> Self {
        Self {
            watermark: AtomicI64::new(i64::MIN),
        }
    }
}

impl Clock {
    /// Advances the watermark (milliseconds since the epoch); never moves back.
    pub fn advance_watermark(&self, watermark: i64) {
        self.watermark.fetch_max(watermark, Ordering::Relaxed);
    }

    /// The current watermark (`i64::MIN` before the first one).
    pub fn watermark(&self) -> i64 {
        self.watermark.load(Ordering::Relaxed)
    }

    /// "Now" in `domain`, in milliseconds since the epoch.
    pub fn now(&self, domain: TimeDomain) -> i64 {
        match domain {
            TimeDomain::EventTime => self.watermark(),
            TimeDomain::ProcessingTime => wall_clock_millis(),
        }
    }
}

pub(crate) fn wall_clock_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Whether a value written at `written` has expired at `now` under `ttl`.
pub fn is_expired(ttl: Option<Ttl>, written: i64, now: i64) -> bool {
    ttl.is_some_and(|t| written.saturating_add(t.millis) <= now)
}

/// The RocksDB compaction filter of a state with a TTL: removes expired
/// values, and trims expired elements out of lists.
pub(crate) struct TtlCompactionFilter {
    pub(crate) name: std::ffi::CString,
    pub(crate) ttl: Ttl,
    pub(crate) is_list: bool,
    pub(crate) clock: Arc<Clock>,
    buf: Vec<u8>,
}

impl TtlCompactionFilter {
    pub(crate) fn new(state: &str, ttl: Ttl, is_list: bool, clock: Arc<Clock>) -> Self {
        let name = std::ffi::CString::new(format!("strata-ttl-{state}")).unwrap_or_default();
        Self {
            name,
            ttl,
            is_list,
            clock,
            buf: Vec::new(),
        }
    }

    fn decide_list(&mut self, value: &[u8], now: i64) -> rocksdb::CompactionDecision {
        self.buf.clear();
        let complete = codec::is_complete_list(value);
        if complete {
            self.buf.extend_from_slice(&codec::list_base_marker());
        }
        let mut dropped = false;
        for element in codec::list_elements("", value) {
            let Ok((ts, body)) = element else {
                return rocksdb::CompactionDecision::Keep;
            };
            if is_expired(Some(self.ttl), ts, now) {
                dropped = true;
            } else {
                codec::put_list_element(&mut self.buf, ts, body);
            }
        }
        // A complete list keeps its base marker even when every element
        // expired: without it, an older copy in L3 would be read as current.
        match (dropped, self.buf.is_empty()) {
            (false, _) => rocksdb::CompactionDecision::Keep,
            (true, true) => rocksdb::CompactionDecision::Remove,
            // SAFETY: RocksDB's C API copies the new value before the filter
            // callback returns (`new_value->assign(..)`), and `self.buf` is not
            // touched again until the next call, so the slice outlives its use.
            (true, false) => rocksdb::CompactionDecision::Change(unsafe {
                std::mem::transmute::<&[u8], &'static [u8]>(self.buf.as_slice())
            }),
        }
    }
}

impl rocksdb::compaction_filter::CompactionFilter for TtlCompactionFilter {
    fn filter(&mut self, _level: u32, _key: &[u8], value: &[u8]) -> rocksdb::CompactionDecision {
        let now = self.clock.now(self.ttl.domain);
        if self.is_list {
            return self.decide_list(value, now);
        }
        match codec::split_entry("", value) {
            Ok((ts, _)) if !codec::is_tombstone(value) && is_expired(Some(self.ttl), ts, now) => {
                rocksdb::CompactionDecision::Remove
            }
            _ => rocksdb::CompactionDecision::Keep,
        }
    }

    fn name(&self) -> &std::ffi::CStr {
        &self.name
    }
}

/// Makes one [`TtlCompactionFilter`] per compaction.
pub(crate) struct TtlFilterFactory {
    pub(crate) name: std::ffi::CString,
    pub(crate) state: String,
    pub(crate) ttl: Ttl,
    pub(crate) is_list: bool,
    pub(crate) clock: Arc<Clock>,
}

impl rocksdb::compaction_filter_factory::CompactionFilterFactory for TtlFilterFactory {
    type Filter = TtlCompactionFilter;

    fn create(
        &mut self,
        _context: rocksdb::compaction_filter_factory::CompactionFilterContext,
    ) -> Self::Filter {
        TtlCompactionFilter::new(&self.state, self.ttl, self.is_list, self.clock.clone())
    }

    fn name(&self) -> &std::ffi::CStr {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_exactly_ttl_old_is_expired() {
        let ttl = Some(Ttl::event_time(Duration::from_millis(10)));
        assert!(!is_expired(ttl, 100, 109));
        assert!(is_expired(ttl, 100, 110));
        assert!(!is_expired(None, 100, i64::MAX));
    }

    #[test]
    fn watermark_never_moves_back() {
        let c = Clock::default();
        c.advance_watermark(10);
        c.advance_watermark(5);
        assert_eq!(c.watermark(), 10);
    }
}
