//! `strata jobs status --brokers B --group G [--topic T]`: which process
//! owns which partition of a job run by a consumer group, each shard's last
//! checkpoint and its lag (what the group's committed offsets say: every
//! shard checkpoint commits its offset as `strata:chk-<id>`).

use crate::error::{Result, RuntimeError};
use strata_connectors::kafka::{describe_group, GroupInfo, KafkaSecurity};

/// The status as lines of text: a header, then one line per partition.
///
/// Errors: no `topic` given and no member to learn it from; the brokers
/// cannot be reached.
pub(crate) fn lines(
    brokers: &str,
    security: &KafkaSecurity,
    group: &str,
    topic: Option<&str>,
) -> Result<Vec<String>> {
    let topic = match topic {
        Some(t) => t.to_owned(),
        None => subscribed_topic(brokers, security, group)?,
    };
    let info = describe_group(brokers, security, group, &topic)?;
    if info.members.is_empty() && info.partitions.iter().all(|(c, _)| c.offset.is_none()) {
        return Err(RuntimeError::Usage(format!(
            "group {group} has no member and has committed nothing on topic {topic} (state {}): check the group and topic names",
            info.state
        )));
    }
    let mut lines = vec![
        format!(
            "group {group} on topic {topic}: {}, {} member(s)",
            info.state,
            info.members.len()
        ),
        format!(
            "{:<10} {:<32} {:>12} {:>12} {:>12} {:>10}",
            "partition", "owner", "checkpoint", "committed", "end", "lag"
        ),
    ];
    for (c, end) in &info.partitions {
        let owner = owner_of(&info, c.partition);
        let checkpoint = checkpoint_of(&c.metadata);
        let committed = c.offset.map_or("-".into(), |o| o.to_string());
        let lag = end - c.offset.unwrap_or(0);
        lines.push(format!(
            "{:<10} {:<32} {:>12} {:>12} {:>12} {:>10}",
            c.partition, owner, checkpoint, committed, end, lag
        ));
    }
    Ok(lines)
}

/// `strata:chk-7` → `chk-7`; `strata:chk-7:end@N` → `chk-7 (ended)`;
/// anything else (no strata checkpoint yet) → `-`.
fn checkpoint_of(metadata: &str) -> String {
    let Some(m) = metadata.strip_prefix("strata:") else {
        return "-".into();
    };
    match m.split_once(":end@") {
        Some((chk, _)) => format!("{chk} (ended)"),
        None => m.to_owned(),
    }
}

fn owner_of(info: &GroupInfo, partition: i32) -> String {
    info.members
        .iter()
        .find(|m| m.partitions.contains(&partition))
        .map_or("(none)".into(), |m| format!("{} {}", m.client_id, m.host))
}

/// The topic the group's members read, when they are running.
fn subscribed_topic(brokers: &str, security: &KafkaSecurity, group: &str) -> Result<String> {
    strata_connectors::kafka::group_topics(brokers, security, group)?
        .into_iter()
        .next()
        .ok_or_else(|| {
            RuntimeError::Usage(format!(
                "group {group} has no running member to learn its topic from: give --topic"
            ))
        })
}

#[cfg(test)]
mod tests {
    #[test]
    fn committed_metadata_names_the_checkpoint() {
        assert_eq!(super::checkpoint_of("strata:chk-7"), "chk-7");
        assert_eq!(
            super::checkpoint_of("strata:chk-9:end@1200"),
            "chk-9 (ended)"
        );
        assert_eq!(super::checkpoint_of(""), "-");
        assert_eq!(super::checkpoint_of("someone else's"), "-");
    }
}
