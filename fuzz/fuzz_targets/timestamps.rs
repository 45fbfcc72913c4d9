//! Any text as every field type, timestamps above all: parsing never
//! panics, and an accepted timestamp lies in the documented range and
//! formats back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_connectors::{format_timestamp, parse_text, FieldType, Value, MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for ty in [FieldType::Timestamp, FieldType::Int64, FieldType::Float64, FieldType::String] {
        if let Ok(Value::Timestamp(ms)) = parse_text(text, ty) {
            assert!((MIN_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(&ms), "{text:?} -> {ms}");
            let _ = format_timestamp(ms);
        }
    }
    let _ = strata_cache::composite_key::decode(data);
});
