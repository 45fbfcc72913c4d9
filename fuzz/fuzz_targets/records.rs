//! Any bytes as a CSV or JSON-lines input: reading every record (good or
//! bad) to the end, and resuming from every reported position, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_connectors::{FieldType, FileSource, Format, Position, Schema};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, bytes)) = data.split_first() else {
        return;
    };
    let format = if selector % 2 == 0 { Format::Csv } else { Format::JsonLines };
    let schema = Schema::new(&[
        ("date", FieldType::Timestamp),
        ("delay", FieldType::Int64),
        ("ratio", FieldType::Float64),
        ("origin", FieldType::String),
    ]);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("input");
    std::fs::write(&path, bytes).expect("write input");
    let mut positions = vec![Position::default()];
    if let Ok(mut source) = FileSource::open(&path, format, &schema, Position::default()) {
        while let Ok(Some(_)) = source.next_row() {
            positions.push(source.position());
            let _ = source.identity(source.position());
        }
    }
    for at in positions.into_iter().step_by(7) {
        if let Ok(mut source) = FileSource::open(&path, format, &schema, at) {
            while let Ok(Some(_)) = source.next_row() {}
        }
    }
});
