//! `strata topic load` and `strata topic read` (see
//! `strata_connectors::kafka::{load_topic, read_topic}`), with a progress
//! bar on a terminal.

use super::args::ConfigArgs;
use crate::error::{Result, RuntimeError};
use std::path::PathBuf;
use strata_connectors::kafka::{load_topic, read_topic, LoadOptions, ReadOptions};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum TopicCommand {
    /// Write a Parquet, CSV or JSON-lines file into a topic, one JSON object
    /// per record, keyed by the given columns (equal keys land in one
    /// partition); the topic is created with --partitions if absent.
    Load {
        /// The file.
        file: PathBuf,
        /// Kafka brokers, host:port[,host:port].
        #[arg(long)]
        brokers: String,
        /// The topic.
        #[arg(long)]
        topic: String,
        /// The key columns, comma-separated: the job's key (route-history:
        /// origin,destination; user-history: user_id).
        #[arg(long, value_delimiter = ',', required = true)]
        key: Vec<String>,
        /// Partitions of a topic created here [default: 1].
        #[arg(long)]
        partitions: Option<i32>,
        /// Send at most this many records per second (a load test's steady
        /// input; each message's timestamp is when it was sent).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        rate: Option<u64>,
        #[command(flatten)]
        settings: ConfigArgs,
    },
    /// Write every record of a topic, to the end of each partition, as JSON
    /// lines {partition, offset, timestamp, key, value, headers}.
    Read {
        /// Kafka brokers, host:port[,host:port].
        #[arg(long)]
        brokers: String,
        /// The topic.
        #[arg(long)]
        topic: String,
        /// Only records of committed transactions (isolation.level=read_committed).
        #[arg(long)]
        read_committed: bool,
        /// Write here instead of to stdout.
        #[arg(long)]
        output: Option<PathBuf>,
        #[command(flatten)]
        settings: ConfigArgs,
    },
}

pub(crate) fn main(command: TopicCommand) -> Result<()> {
    match command {
        TopicCommand::Load {
            file,
            brokers,
            topic,
            key,
            partitions,
            rate,
            settings,
        } => {
            let security = settings.reach(&brokers)?;
            let bar = crate::progress::terminal_bar();
            let mut progress = |done: u64, total: u64| {
                if let Some(bar) = &bar {
                    bar.set_length(total);
                    bar.set_position(done);
                }
            };
            let started = std::time::Instant::now();
            let report = load_topic(
                &file,
                &brokers,
                &security,
                &topic,
                &LoadOptions {
                    key,
                    partitions,
                    rate,
                },
                &mut progress,
            )?;
            if let Some(bar) = bar {
                bar.finish_and_clear();
            }
            eprintln!(
                "strata: wrote {} records of {} to topic {topic} ({} partitions{}) in {:.1} s",
                report.records,
                file.display(),
                report.partitions,
                if report.created { ", created" } else { "" },
                started.elapsed().as_secs_f64()
            );
            Ok(())
        }
        TopicCommand::Read {
            brokers,
            topic,
            read_committed,
            output,
            settings,
        } => {
            let security = settings.reach(&brokers)?;
            let options = ReadOptions { read_committed };
            let n = match &output {
                Some(path) => {
                    let file = std::fs::File::create(path).map_err(RuntimeError::io(path))?;
                    let mut w = std::io::BufWriter::new(file);
                    read_topic(&brokers, &security, &topic, &options, &mut w)?
                }
                None => {
                    let stdout = std::io::stdout();
                    let mut w = std::io::BufWriter::new(stdout.lock());
                    read_topic(&brokers, &security, &topic, &options, &mut w)?
                }
            };
            eprintln!("strata: read {n} records of topic {topic}");
            Ok(())
        }
    }
}
