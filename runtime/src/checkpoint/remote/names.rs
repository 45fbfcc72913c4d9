//! What the objects under a prefix are, by name: a checkpoint's private
//! files, shared SST files, strata's other files, the lease, or not
//! strata's at all; and which local files are never mirrored.

/// The kind of a checkpoint-relative object name.
pub(super) enum Kind {
    /// `chk-<N>/…`: private to checkpoint N.
    Private(u64),
    /// `shared/…`: an SST file any checkpoint may list.
    Shared,
    /// strata's other files (names starting with `_`): the sinks' staged
    /// parts, the L3 lineage, the write-back marker.
    Other,
    /// Not strata's (e.g. another job's prefix below this one): never
    /// deleted, downloaded or counted.
    Foreign,
    /// The job's lease on the prefix (`_owner`, see [`super::lease`]):
    /// only the lease reads, writes and deletes it.
    Lease,
}

/// The lease's object, relative to the prefix.
pub(super) const OWNER: &str = "_owner";

pub(super) fn kind(rel: &str) -> Kind {
    if rel.starts_with("shared/") {
        return Kind::Shared;
    }
    if rel == OWNER {
        return Kind::Lease;
    }
    let id = rel
        .strip_prefix("chk-")
        .and_then(|r| r.split_once('/'))
        .and_then(|(n, _)| n.parse().ok());
    match id {
        Some(id) => Kind::Private(id),
        None if rel.starts_with('_') => Kind::Other,
        None => Kind::Foreign,
    }
}

pub(super) fn metadata_name(id: u64) -> String {
    format!("chk-{id}/_metadata")
}

/// Whether the local file `rel` is never mirrored: the live state
/// (`_work`), the lock, inspections, temporary files and `_metadata`
/// (put by [`Remote::put_metadata`], last).
pub(super) fn is_local_only(rel: &str) -> bool {
    let top = rel.split('/').next().unwrap_or(rel);
    let name = rel.rsplit('/').next().unwrap_or(rel);
    top == "_work"
        || top == "_lock"
        || top.starts_with("_inspect-")
        || name.ends_with(".tmp")
        || name == "_metadata"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_sorted_into_private_shared_strata_s_own_and_foreign() {
        assert!(matches!(
            kind("chk-12/op-0/MANIFEST-000005"),
            Kind::Private(12)
        ));
        assert!(matches!(kind("chk-12/_metadata"), Kind::Private(12)));
        assert!(matches!(kind("shared/run-op0-000009.sst"), Kind::Shared));
        assert!(matches!(
            kind("_kafka/.rh-0-000003.jsonl.inprogress"),
            Kind::Other
        ));
        assert!(matches!(kind("_l3_lineage"), Kind::Other));
        // Another job's prefix below this one, or a stray object.
        assert!(matches!(kind("jobA/chk-3/_metadata"), Kind::Foreign));
        assert!(matches!(kind("chk-x/y"), Kind::Foreign));
        assert!(matches!(kind("notes.txt"), Kind::Foreign));
    }
}
