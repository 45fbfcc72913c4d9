//! Any text as a checkpoint's `_metadata`: decoding and validating it never
//! panics (a damaged checkpoint is an error naming what is wrong).
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_runtime::checkpoint::CheckpointMetadata;
use strata_runtime::JobConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(meta) = CheckpointMetadata::decode(text) {
        let _ = meta.validate(&JobConfig::default());
    }
});
