//! Job configuration: one TOML file, overridable key by key with `-D`.
//!
//! Every key, its meaning, default and allowed range (see also the README):
//!
//! | key | default | allowed | meaning |
//! |---|---|---|---|
//! | `parallelism` | cores | 1–256 | instances of the keyed operator |
//! | `sink.parallelism` | `parallelism` | 1–`parallelism` | instances of the sink |
//! | `max-parallelism` | 128 | parallelism–32768 | key groups |
//! | `checkpoint.interval` | `10s` | 100ms–1d | time between checkpoint triggers |
//! | `checkpoint.retained` | 3 | 1–100 | completed checkpoints kept |
//! | `checkpoint.timeout` | `10min` | 100ms–1d | a checkpoint not completed this long after its trigger fails |
//! | `checkpoint.tolerable-failures` | 0 | 0–1000 | consecutive failed checkpoints the job survives; one more fails it |
//! | `checkpoint.storage.retry-for` | `60s` | 0–1d | with `--checkpoint-dir s3://…`: how long a failing object store request is retried, with backoff, before its checkpoint fails (the checkpoint is late meanwhile; processing goes on) |
//! | `state.l1.capacity` | `64MB` | 64KB–1TB | L1 (moka) bytes, split over instances |
//! | `state.max-list-bytes` | `256MiB` | 1KB–3GiB | the most one key's list may hold (encoded); more is an error naming the key |
//! | `state.l2.memory` | `256MB` | 8MB–1TB | RocksDB block cache + memtables, whole process |
//! | `state.local-dir` | `<checkpoint-dir>/_work` | path | live RocksDB directories (same file system as the checkpoints, for hard links) |
//! | `checkpoint.local-copy` | `<output>/_checkpoints` | path | with `--checkpoint-dir s3://…`: the local copy of the checkpoints the job works on (see `checkpoint::remote`); required with a Kafka output |
//! | `source.max-records-per-second` | absent = unthrottled | 1–10⁹ | source throttle |
//! | `sink.max-records-per-second` | absent = unthrottled | 1–10⁹ | sink throttle, shared by the sink instances |
//! | `channel.capacity` | 16 | 1–65536 | batches buffered on each edge |
//! | `channel.batch-size` | 512 | 1–65536 | records per batch |
//! | `watermark.out-of-orderness` | `0s` | 0–365d | how far behind the newest timestamp a record may be |
//! | `watermark.interval` | `200ms` | 1ms–1h | how often the source emits a watermark and sends partial batches |
//! | `source.max-record-bytes` | `1MiB` | 1KB–1GB | the longest line of a CSV or JSON-lines input (and text of a Parquet row); a longer one is a bad record, read past without being held |
//! | `source.csv.multiline-fields` | `false` | `true`, `false` | whether a quoted CSV field may hold line breaks (if not, one that does is a bad record: a stray quote) |
//! | `query.partitioner` | `consistent` | `consistent`, `murmur2` | in a consumer group, how `--query-addr` finds a key's partition: librdkafka's default (CRC-32, what `strata topic load` writes) or the Java clients' (Kafka Streams') |
//! | `bad-input.policy` | `fail` | `fail`, `dead-letter` | what a bad record does |
//! | `state.l2.capacity` | absent = unbounded | 1MB–1PB | L2 bytes on disk per instance beyond which cold keys move to L3 (needs L3) |
//! | `source.idle-timeout` | absent = never idle | 1ms–1d | a split (Kafka partition) without records this long does not hold the watermark back |
//! | `state.l3.*` | L3 off | see `config::l3` | the Cassandra/ScyllaDB cold tier |
//! | `source.kafka.*`, `sink.kafka.*` | | see [`kafka`] | Kafka input and output |
//! | `kafka.*` | plaintext | see `config::kafka_security` | TLS and SASL of every Kafka client |
//!
//! Sizes take units (`KB`, `MB`, `GB`, `KiB`, `MiB`, `GiB`); durations take
//! humantime units (`500ms`, `2s`, `60days`).

pub mod kafka;
mod kafka_security;
mod l3;
mod secret;

pub use kafka::KafkaSettings;
pub use kafka_security::KafkaSecuritySettings;
pub use l3::L3Settings;

use crate::error::{Result, RuntimeError};
use std::path::PathBuf;
use std::time::Duration;

/// What a bad record does (`bad-input.policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum BadInputPolicy {
    /// Fail the job with a one-line error naming record, field and reason.
    Fail,
    /// Write the record's error to `dead-letter-*.jsonl` in the output
    /// directory (exactly once, like the output), count it, and go on.
    DeadLetter,
}

/// A validated job configuration.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct JobConfig {
    /// Instances of the keyed operator.
    pub parallelism: u32,
    /// Instances of the sink; `None` = `parallelism`.
    pub sink_parallelism: Option<u32>,
    /// Number of key groups.
    pub max_parallelism: u32,
    /// Time between checkpoint triggers.
    pub checkpoint_interval: Duration,
    /// Completed checkpoints kept.
    pub checkpoints_retained: usize,
    /// A checkpoint not completed this long after its trigger fails
    /// (Flink's `execution.checkpointing.timeout`).
    pub checkpoint_timeout: Duration,
    /// Consecutive failed checkpoints the job survives (Flink's
    /// `execution.checkpointing.tolerable-failed-checkpoints`).
    pub tolerable_failures: u32,
    /// How long a failing object store request is retried before its
    /// checkpoint fails (`checkpoint.storage.retry-for`).
    pub storage_retry_for: Duration,
    /// L1 bytes for the whole process.
    pub l1_capacity: u64,
    /// L2 memory (block cache + memtables) for the whole process.
    pub l2_memory: u64,
    /// The most bytes one key's list may hold.
    pub max_list_bytes: u64,
    /// Live RocksDB directories; `None` = `<checkpoint-dir>/_work`.
    pub local_dir: Option<PathBuf>,
    /// `checkpoint.local-copy`: where a job whose checkpoints live in an
    /// object store keeps its local copy of them.
    pub checkpoint_local_copy: Option<PathBuf>,
    /// Source throttle, records per second.
    pub source_rate: Option<u64>,
    /// Sink throttle, records per second for all sink instances together.
    pub sink_rate: Option<u64>,
    /// Batches buffered per edge.
    pub channel_capacity: usize,
    /// Records per batch.
    pub batch_size: usize,
    /// Allowed lateness behind the newest timestamp, in milliseconds.
    pub out_of_orderness_ms: i64,
    /// How often the source emits a watermark and flushes partial batches.
    pub watermark_interval: Duration,
    /// Bad record handling.
    pub bad_input: BadInputPolicy,
    /// Whether a quoted CSV field may hold line breaks.
    pub csv_multiline_fields: bool,
    /// `source.max-record-bytes`: the longest record of a file input.
    pub max_record_bytes: u64,
    /// How a consumer group's query endpoint finds a key's partition.
    pub query_partitioner: strata_connectors::kafka::Partitioner,
    /// L2 bytes on disk per instance beyond which cold keys move to L3.
    pub l2_capacity: Option<u64>,
    /// The cold tier (off unless contact points are set).
    pub l3: L3Settings,
    /// A split without records this long does not hold the watermark back.
    pub idle_timeout: Option<Duration>,
    /// Kafka input and output settings.
    pub kafka: KafkaSettings,
}

impl Default for JobConfig {
    fn default() -> Self {
        Self {
            parallelism: std::thread::available_parallelism().map_or(2, |n| n.get() as u32),
            sink_parallelism: None,
            max_parallelism: strata_cache::key_group::DEFAULT_MAX_PARALLELISM,
            checkpoint_interval: Duration::from_secs(10),
            checkpoints_retained: 3,
            checkpoint_timeout: Duration::from_secs(600),
            tolerable_failures: 0,
            storage_retry_for: Duration::from_secs(60),
            l1_capacity: 64_000_000,
            l2_memory: 256_000_000,
            max_list_bytes: strata_cache::DEFAULT_MAX_LIST_BYTES,
            local_dir: None,
            checkpoint_local_copy: None,
            source_rate: None,
            sink_rate: None,
            channel_capacity: 16,
            batch_size: 512,
            out_of_orderness_ms: 0,
            watermark_interval: Duration::from_millis(200),
            bad_input: BadInputPolicy::Fail,
            csv_multiline_fields: false,
            max_record_bytes: strata_connectors::DEFAULT_MAX_RECORD_BYTES,
            query_partitioner: strata_connectors::kafka::Partitioner::Consistent,
            l2_capacity: None,
            l3: L3Settings::default(),
            idle_timeout: None,
            kafka: KafkaSettings::default(),
        }
    }
}

fn bad(key: &str, reason: impl ToString) -> RuntimeError {
    RuntimeError::Config {
        key: key.to_owned(),
        reason: reason.to_string(),
    }
}

/// Reads one leaf value as a string, whatever TOML type it was written as.
fn text(key: &str, v: &toml::Value) -> Result<String> {
    match v {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        other => Err(bad(key, format!("expected a single value, got {other}"))),
    }
}

fn flag(key: &str, v: &toml::Value) -> Result<bool> {
    match text(key, v)?.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(bad(key, format!("'{other}' is not true or false"))),
    }
}

/// A file path (not checked here: the file is read when it is needed).
fn path(key: &str, v: &toml::Value) -> Result<PathBuf> {
    let p = text(key, v)?;
    if p.trim().is_empty() {
        return Err(bad(key, "must be a file path, not empty"));
    }
    Ok(PathBuf::from(p.trim()))
}

fn dir_path(key: &str, v: &toml::Value) -> Result<PathBuf> {
    let dir = text(key, v)?;
    if dir.trim().is_empty() {
        return Err(bad(key, "must be a directory path, not empty"));
    }
    Ok(PathBuf::from(dir))
}

fn number(key: &str, v: &toml::Value, range: std::ops::RangeInclusive<u64>) -> Result<u64> {
    let t = text(key, v)?;
    let n: u64 = t
        .trim()
        .parse()
        .map_err(|_| bad(key, format!("'{t}' is not a whole number")))?;
    in_range(key, n, range, &t)
}

fn in_range(key: &str, n: u64, range: std::ops::RangeInclusive<u64>, shown: &str) -> Result<u64> {
    if range.contains(&n) {
        Ok(n)
    } else {
        Err(bad(
            key,
            format!(
                "{shown} is outside the allowed range {}–{}",
                range.start(),
                range.end()
            ),
        ))
    }
}

fn size(key: &str, v: &toml::Value, range: std::ops::RangeInclusive<u64>) -> Result<u64> {
    let t = text(key, v)?;
    let n = t
        .trim()
        .parse::<bytesize::ByteSize>()
        .map_err(|_| bad(key, format!("'{t}' is not a size (e.g. 64MB, 1GiB)")))?
        .as_u64();
    if range.contains(&n) {
        return Ok(n);
    }
    let (lo, hi) = (
        bytesize::ByteSize(*range.start()).display().si(),
        bytesize::ByteSize(*range.end()).display().si(),
    );
    Err(bad(
        key,
        format!("{t} is outside the allowed range {lo}–{hi}"),
    ))
}

fn duration(key: &str, v: &toml::Value, min: Duration, max: Duration) -> Result<Duration> {
    let t = text(key, v)?;
    let d = humantime::parse_duration(t.trim()).map_err(|_| {
        bad(
            key,
            format!("'{t}' is not a duration (a whole number and a unit, e.g. 2s, 500ms, 10min)"),
        )
    })?;
    if d < min || d > max {
        return Err(bad(
            key,
            format!(
                "{t} is outside the allowed range {}–{}",
                humantime::format_duration(min),
                humantime::format_duration(max)
            ),
        ));
    }
    Ok(d)
}

impl JobConfig {
    /// Instances of the sink.
    pub fn sink_parallelism(&self) -> u32 {
        self.sink_parallelism.unwrap_or(self.parallelism)
    }

    /// Builds a configuration from a TOML file (optional) and `-D key=value`
    /// overrides, applied in order. Unknown keys and invalid values are
    /// rejected with the key's name and the allowed range.
    pub fn load(file: Option<&std::path::Path>, overrides: &[String]) -> Result<Self> {
        let mut flat: Vec<(String, toml::Value)> = Vec::new();
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| RuntimeError::Usage(format!("config file {}: {e}", path.display())))?;
            let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
                let line = e
                    .span()
                    .map_or(0, |span| text[..span.start].lines().count().max(1));
                RuntimeError::Usage(format!(
                    "config file {} line {line}: {}",
                    path.display(),
                    e.message()
                ))
            })?;
            flatten("", &toml::Value::Table(table), &mut flat);
        }
        for o in overrides {
            let (key, value) = o
                .split_once('=')
                .ok_or_else(|| bad(o, "a -D override must be written key=value"))?;
            flat.push((
                key.trim().to_owned(),
                toml::Value::String(value.trim().to_owned()),
            ));
        }
        let mut config = JobConfig::default();
        for (key, value) in &flat {
            config.set(key, value)?;
        }
        if config.sink_parallelism() > config.parallelism {
            return Err(bad(
                "sink.parallelism",
                format!(
                    "{} is above parallelism {}",
                    config.sink_parallelism(),
                    config.parallelism
                ),
            ));
        }
        config.l3.validate()?;
        config.kafka.security.validate()?;
        if config.l2_capacity.is_some() && !config.l3.enabled() {
            return Err(bad(
                "state.l2.capacity",
                "bounds L2 by moving cold keys to L3: set state.l3.contact-points too",
            ));
        }
        if config.max_parallelism < config.parallelism {
            return Err(bad(
                "max-parallelism",
                format!(
                    "{} is below parallelism {}",
                    config.max_parallelism, config.parallelism
                ),
            ));
        }
        Ok(config)
    }

    fn set(&mut self, key: &str, v: &toml::Value) -> Result<()> {
        const GB: u64 = 1_000_000_000;
        match key {
            "parallelism" => self.parallelism = number(key, v, 1..=256)? as u32,
            "sink.parallelism" => self.sink_parallelism = Some(number(key, v, 1..=256)? as u32),
            "max-parallelism" => self.max_parallelism = number(key, v, 1..=32768)? as u32,
            "checkpoint.interval" => {
                self.checkpoint_interval = duration(
                    key,
                    v,
                    Duration::from_millis(100),
                    Duration::from_secs(86_400),
                )?
            }
            "checkpoint.retained" => self.checkpoints_retained = number(key, v, 1..=100)? as usize,
            "checkpoint.timeout" => {
                self.checkpoint_timeout = duration(
                    key,
                    v,
                    Duration::from_millis(100),
                    Duration::from_secs(86_400),
                )?
            }
            "checkpoint.tolerable-failures" => {
                self.tolerable_failures = number(key, v, 0..=1000)? as u32
            }
            "checkpoint.storage.retry-for" => {
                self.storage_retry_for =
                    duration(key, v, Duration::ZERO, Duration::from_secs(86_400))?
            }
            "state.l1.capacity" => self.l1_capacity = size(key, v, 64_000..=1000 * GB)?,
            "state.l2.memory" => self.l2_memory = size(key, v, 8_000_000..=1000 * GB)?,
            "state.max-list-bytes" => {
                self.max_list_bytes = size(key, v, 1_000..=strata_cache::MAX_LIST_BYTES_LIMIT)?
            }
            "state.l2.capacity" => {
                self.l2_capacity = Some(size(key, v, 1_000_000..=1_000_000 * GB)?)
            }
            k if k.starts_with("state.l3.") => self.l3.set(key, v)?,
            "state.local-dir" => self.local_dir = Some(dir_path(key, v)?),
            "checkpoint.local-copy" => self.checkpoint_local_copy = Some(dir_path(key, v)?),
            "source.max-records-per-second" => self.source_rate = Some(number(key, v, 1..=GB)?),
            "sink.max-records-per-second" => self.sink_rate = Some(number(key, v, 1..=GB)?),
            "channel.capacity" => self.channel_capacity = number(key, v, 1..=65536)? as usize,
            "channel.batch-size" => self.batch_size = number(key, v, 1..=65536)? as usize,
            "watermark.out-of-orderness" => {
                self.out_of_orderness_ms =
                    duration(key, v, Duration::ZERO, Duration::from_secs(365 * 86_400))?.as_millis()
                        as i64
            }
            "watermark.interval" => {
                self.watermark_interval =
                    duration(key, v, Duration::from_millis(1), Duration::from_secs(3600))?
            }
            "query.partitioner" => {
                self.query_partitioner = match text(key, v)?.trim() {
                    "consistent" => strata_connectors::kafka::Partitioner::Consistent,
                    "murmur2" => strata_connectors::kafka::Partitioner::Murmur2,
                    other => {
                        return Err(bad(key, format!("'{other}' is not consistent or murmur2")))
                    }
                }
            }
            "source.max-record-bytes" => self.max_record_bytes = size(key, v, 1_000..=GB)?,
            "source.csv.multiline-fields" => {
                self.csv_multiline_fields = match text(key, v)?.trim() {
                    "true" => true,
                    "false" => false,
                    other => return Err(bad(key, format!("'{other}' is not true or false"))),
                }
            }
            "bad-input.policy" => {
                self.bad_input = match text(key, v)?.trim() {
                    "fail" => BadInputPolicy::Fail,
                    "dead-letter" => BadInputPolicy::DeadLetter,
                    other => {
                        return Err(bad(
                            key,
                            format!("'{other}' is not one of: fail, dead-letter"),
                        ))
                    }
                }
            }
            "source.idle-timeout" => {
                self.idle_timeout = Some(duration(
                    key,
                    v,
                    Duration::from_millis(1),
                    Duration::from_secs(86_400),
                )?)
            }
            _ => {
                if self.kafka.set(key, v)? {
                    return Ok(());
                }
                return Err(bad(
                    key,
                    "unknown key (see the configuration table in the README)",
                ));
            }
        }
        Ok(())
    }
}

fn flatten(prefix: &str, v: &toml::Value, out: &mut Vec<(String, toml::Value)>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        leaf => out.push((prefix.to_owned(), leaf.clone())),
    }
}

/// A configuration from `-D` overrides alone (for the config tests).
#[cfg(test)]
fn load_overrides(overrides: &[&str]) -> Result<JobConfig> {
    JobConfig::load(
        None,
        &overrides.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(overrides: &[&str]) -> Result<JobConfig> {
        load_overrides(overrides)
    }

    #[test]
    fn overrides_set_the_issue_keys() {
        let c = load(&[
            "checkpoint.interval=2s",
            "state.l1.capacity=1MB",
            "sink.max-records-per-second=20000",
        ])
        .unwrap();
        assert_eq!(c.checkpoint_interval, Duration::from_secs(2));
        assert_eq!(c.l1_capacity, 1_000_000);
        assert_eq!(c.sink_rate, Some(20_000));
        assert_eq!(c.source_rate, None);
    }

    #[test]
    fn a_toml_file_and_overrides_combine_and_later_wins() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.toml");
        std::fs::write(&path, "parallelism = 3\n[state.l1]\ncapacity = \"2MB\"\n").unwrap();
        let c = JobConfig::load(Some(&path), &["parallelism=1".into()]).unwrap();
        assert_eq!((c.parallelism, c.l1_capacity), (1, 2_000_000));
    }

    #[test]
    fn l3_keys_configure_the_cold_tier() {
        let c = load(&[
            "state.l3.contact-points=127.0.0.1:9042, 10.0.0.2:9042",
            "state.l2.capacity=8MB",
            "state.l3.keyspace=jobs",
            "state.l3.migration.state=history",
            "state.l3.migration.table=legacy.user_events",
        ])
        .unwrap();
        assert_eq!(c.l2_capacity, Some(8_000_000));
        let client = c.l3.client_config(7).unwrap();
        assert_eq!(client.contact_points, ["127.0.0.1:9042", "10.0.0.2:9042"]);
        assert_eq!(client.keyspace, "jobs");
        let m = client.migration.unwrap();
        assert_eq!(
            (m.table.as_str(), m.key_column.as_str()),
            ("legacy.user_events", "user_id")
        );
    }

    #[test]
    fn l3_keys_without_contact_points_or_with_bad_values_are_refused() {
        for (args, named) in [
            (&["state.l2.capacity=8MB"][..], "state.l2.capacity"),
            (&["state.l3.keyspace=jobs"][..], "state.l3.contact-points"),
            (
                &["state.l3.contact-points=localhost"][..],
                "state.l3.contact-points",
            ),
            (
                &[
                    "state.l3.contact-points=h:1",
                    "state.l3.keyspace=drop table",
                ][..],
                "state.l3.keyspace",
            ),
            (
                &["state.l3.contact-points=h:1", "state.l3.consistency=two"][..],
                "state.l3.consistency",
            ),
            (
                &["state.l3.contact-points=h:1", "state.l3.migration.state=h"][..],
                "state.l3.migration",
            ),
        ] {
            let args: Vec<&str> = args.to_vec();
            let e = load(&args).unwrap_err().to_string();
            assert!(e.contains(named), "{args:?}: {e}");
        }
    }

    #[test]
    fn invalid_values_name_the_key_and_range() {
        let e = load(&["state.l1.capacity=1KB"]).unwrap_err().to_string();
        assert!(
            e.contains("state.l1.capacity") && e.contains("allowed range"),
            "{e}"
        );
        let e = load(&["checkpoint.interval=soon"]).unwrap_err().to_string();
        assert!(
            e.contains("checkpoint.interval") && e.contains("not a duration"),
            "{e}"
        );
        let e = load(&["no.such.key=1"]).unwrap_err().to_string();
        assert!(
            e.contains("no.such.key") && e.contains("unknown key"),
            "{e}"
        );
    }
}
