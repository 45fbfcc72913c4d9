//! Rows: what file sources produce, typed by a [`Schema`] the job declares.

use crate::error::RecordError;

/// The type of a column as a job wants it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    /// UTF-8 text.
    String,
    /// A 64-bit signed integer (smaller integer columns are widened).
    Int64,
    /// A 64-bit float (integer columns are converted).
    Float64,
    /// A point in time, as milliseconds since the Unix epoch. Read from
    /// Parquet timestamp/date columns, or from text as
    /// `YYYY-MM-DDTHH:MM[:SS[.fff]]`, `YYYY-MM-DD HH:MM[:SS]`, `YYYY/MM/DD HH:MM`
    /// (taken as UTC), RFC 3339, or an integer of milliseconds. It must lie
    /// in [`MIN_TIMESTAMP_MS`]`..=`[`MAX_TIMESTAMP_MS`] (years 1–9999); any
    /// other is a bad record.
    Timestamp,
    /// Bytes (a binary payload): a Parquet binary column as it is, or a
    /// string column's UTF-8 bytes; in CSV and JSON the text's UTF-8
    /// bytes, and in JSON also `{"base64": "…"}` (standard alphabet,
    /// padded) for bytes that are not text.
    Bytes,
}

impl FieldType {
    /// A short name for error messages.
    pub fn label(self) -> &'static str {
        match self {
            FieldType::String => "string",
            FieldType::Int64 => "integer",
            FieldType::Float64 => "float",
            FieldType::Timestamp => "timestamp",
            FieldType::Bytes => "bytes",
        }
    }
}

/// The columns a job reads, by name and type, in the order [`Row`] holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    /// (name, type) pairs.
    pub fields: Vec<(String, FieldType)>,
}

impl Schema {
    /// A schema from (name, type) pairs.
    pub fn new(fields: &[(&str, FieldType)]) -> Self {
        Self {
            fields: fields.iter().map(|(n, t)| ((*n).to_owned(), *t)).collect(),
        }
    }
}

/// The earliest supported event time: 0001-01-01T00:00:00Z, in ms since the epoch.
pub const MIN_TIMESTAMP_MS: i64 = -62_135_596_800_000;
/// The latest supported event time: 9999-12-31T23:59:59.999Z, in ms since the epoch.
pub const MAX_TIMESTAMP_MS: i64 = 253_402_300_799_999;

/// Checks that `ms` is a supported event time (see [`FieldType::Timestamp`]);
/// the error says what is wrong with it.
pub fn check_timestamp(ms: i64) -> Result<i64, String> {
    if (MIN_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(&ms) {
        Ok(ms)
    } else {
        Err(format!(
            "timestamp {ms} ms is outside the supported range 0001-01-01T00:00:00Z..=9999-12-31T23:59:59.999Z ({MIN_TIMESTAMP_MS}..={MAX_TIMESTAMP_MS} ms since the epoch)"
        ))
    }
}

/// One field's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Absent (SQL NULL, JSON null, empty CSV cell).
    Null,
    /// Text.
    String(String),
    /// An integer.
    Int64(i64),
    /// A float.
    Float64(f64),
    /// Milliseconds since the Unix epoch.
    Timestamp(i64),
    /// Bytes.
    Bytes(Vec<u8>),
}

impl Value {
    /// The value as JSON: a timestamp as `YYYY-MM-DDTHH:MM:SS[.mmm]`
    /// text, a float that JSON cannot hold (NaN, ±∞) and a null as `null`,
    /// bytes as [`bytes_json`] prints them.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::String(s) => s.as_str().into(),
            Value::Int64(i) => (*i).into(),
            Value::Float64(f) => serde_json::Number::from_f64(*f).into(),
            Value::Timestamp(ms) => format_timestamp(*ms).into(),
            Value::Bytes(b) => bytes_json(b),
        }
    }
}

/// Bytes as JSON: their text if they are UTF-8, else `{"base64": "…"}`,
/// the form a JSON input gives bytes that are not text in (see
/// [`FieldType::Bytes`]).
pub fn bytes_json(bytes: &[u8]) -> serde_json::Value {
    use base64::Engine;
    match std::str::from_utf8(bytes) {
        Ok(text) => text.into(),
        Err(_) => serde_json::json!({
            "base64": base64::engine::general_purpose::STANDARD.encode(bytes)
        }),
    }
}

/// The bytes a JSON value gives a [`FieldType::Bytes`] field: a string's
/// UTF-8 bytes, or the decoded `base64` of `{"base64": "…"}`; the error
/// says what is wrong.
pub(crate) fn bytes_of_json(v: serde_json::Value) -> Result<Vec<u8>, String> {
    use base64::Engine;
    match v {
        serde_json::Value::String(s) => Ok(s.into_bytes()),
        serde_json::Value::Object(m) if m.len() == 1 => match m.get("base64") {
            Some(serde_json::Value::String(b)) => base64::engine::general_purpose::STANDARD
                .decode(b)
                .map_err(|e| format!("\"base64\" is not base64: {e}")),
            _ => Err("expected bytes: a string, or {\"base64\": \"…\"}".to_owned()),
        },
        other => Err(format!(
            "expected bytes: a string, or {{\"base64\": \"…\"}}, got {other}"
        )),
    }
}

/// One input record: values in schema order, and its 1-based position.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The record's 1-based position in the input.
    pub number: u64,
    /// Values, in the order of the schema's fields.
    pub values: Vec<Value>,
}

impl Row {
    /// The row as a JSON object of `schema`'s field names, each value as
    /// [`Value::to_json`] prints it.
    pub fn to_json(&self, schema: &Schema) -> serde_json::Value {
        let fields = schema
            .fields
            .iter()
            .zip(&self.values)
            .map(|((name, _), v)| (name.clone(), v.to_json()));
        serde_json::Value::Object(fields.collect())
    }

    /// Bytes of the row's text and bytes values (what
    /// `source.max-record-bytes` bounds for a Parquet row).
    pub fn text_bytes(&self) -> u64 {
        self.values
            .iter()
            .map(|v| match v {
                Value::String(s) => s.len() as u64,
                Value::Bytes(b) => b.len() as u64,
                _ => 0,
            })
            .sum()
    }

    fn error(&self, schema: &Schema, i: usize, reason: String) -> RecordError {
        RecordError {
            record: self.number,
            field: schema.fields.get(i).map(|(n, _)| n.clone()),
            reason,
            ..Default::default()
        }
    }

    /// Takes field `i` as a string; `Null` is an error naming the field.
    pub fn take_string(&mut self, schema: &Schema, i: usize) -> Result<String, RecordError> {
        match std::mem::replace(&mut self.values[i], Value::Null) {
            Value::String(s) => Ok(s),
            other => Err(self.error(schema, i, format!("expected a string, got {other:?}"))),
        }
    }

    /// Takes field `i` as bytes (a string's UTF-8 bytes too); `Null` is
    /// an error naming the field.
    pub fn take_bytes(&mut self, schema: &Schema, i: usize) -> Result<Vec<u8>, RecordError> {
        match std::mem::replace(&mut self.values[i], Value::Null) {
            Value::Bytes(b) => Ok(b),
            Value::String(s) => Ok(s.into_bytes()),
            other => Err(self.error(schema, i, format!("expected bytes, got {other:?}"))),
        }
    }

    /// Field `i` as an integer.
    pub fn int64(&self, schema: &Schema, i: usize) -> Result<i64, RecordError> {
        match self.values[i] {
            Value::Int64(v) => Ok(v),
            ref other => Err(self.error(schema, i, format!("expected an integer, got {other:?}"))),
        }
    }

    /// Field `i` as a timestamp (ms since the epoch), in the supported range.
    pub fn timestamp(&self, schema: &Schema, i: usize) -> Result<i64, RecordError> {
        match self.values[i] {
            Value::Timestamp(v) => check_timestamp(v).map_err(|e| self.error(schema, i, e)),
            ref other => Err(self.error(schema, i, format!("expected a timestamp, got {other:?}"))),
        }
    }
}

/// Parses text as a value of type `ty` (the rules of [`FieldType`]).
/// An empty string is `Null`.
pub fn parse_text(text: &str, ty: FieldType) -> Result<Value, String> {
    if text.is_empty() {
        return Ok(Value::Null);
    }
    let bad = |what: &str| format!("'{text}' is not {what}");
    match ty {
        FieldType::String => Ok(Value::String(text.to_owned())),
        FieldType::Bytes => Ok(Value::Bytes(text.as_bytes().to_vec())),
        FieldType::Int64 => text
            .trim()
            .parse()
            .map(Value::Int64)
            .map_err(|_| bad("an integer")),
        FieldType::Float64 => text
            .trim()
            .parse()
            .map(Value::Float64)
            .map_err(|_| bad("a number")),
        FieldType::Timestamp => parse_timestamp(text.trim())
            .ok_or_else(|| bad("a timestamp (e.g. 2001-01-01T00:01:00)"))
            .and_then(check_timestamp)
            .map(Value::Timestamp),
    }
}

fn parse_timestamp(text: &str) -> Option<i64> {
    if let Some(ms) = parse_plain_timestamp(text) {
        return Some(ms);
    }
    const FORMATS: [&str; 6] = [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
        "%Y/%m/%d %H:%M:%S",
        "%Y/%m/%d %H:%M",
    ];
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Some(t.timestamp_millis());
    }
    FORMATS
        .iter()
        .find_map(|f| chrono::NaiveDateTime::parse_from_str(text, f).ok())
        .map(|t| t.and_utc().timestamp_millis())
        .or_else(|| text.parse::<i64>().ok())
}

/// Formats milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SS` (UTC).
pub fn format_timestamp(ms: i64) -> String {
    use chrono::{Datelike, Timelike};
    let Some(t) = chrono::DateTime::from_timestamp_millis(ms).map(|t| t.naive_utc()) else {
        return ms.to_string();
    };
    if !(0..=9999).contains(&t.year()) {
        return t.format("%Y-%m-%dT%H:%M:%S").to_string();
    }
    // The common case without chrono's format-string interpretation (it
    // was 3 % of route-history's CPU).
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// Formats milliseconds since the epoch as RFC 3339 in UTC with
/// milliseconds, `YYYY-MM-DDTHH:MM:SS.sssZ` (as Java's `Instant` and
/// Cassandra's `timestamp` keep them); the number itself outside years
/// 0–9999.
pub fn format_timestamp_millis(ms: i64) -> String {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) if (0..=9999).contains(&chrono::Datelike::year(&t)) => {
            t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        }
        _ => ms.to_string(),
    }
}

/// `YYYY-MM-DDTHH:MM:SS` (or with a space for the `T`), the form strata
/// writes and the flights data uses, parsed without chrono's
/// format-string interpretation; `None` for any other text.
fn parse_plain_timestamp(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let shape = b.len() == 19
        && b[4] == b'-'
        && b[7] == b'-'
        && (b[10] == b'T' || b[10] == b' ')
        && b[13] == b':'
        && b[16] == b':';
    if !shape {
        return None;
    }
    let number = |from: usize, to: usize| -> Option<u32> {
        b[from..to].iter().try_fold(0u32, |n, c| {
            c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
        })
    };
    let date =
        chrono::NaiveDate::from_ymd_opt(number(0, 4)? as i32, number(5, 7)?, number(8, 10)?)?;
    let time = date.and_hms_opt(number(11, 13)?, number(14, 16)?, number(17, 19)?)?;
    Some(time.and_utc().timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millisecond_timestamps_keep_their_milliseconds_and_parse_back() {
        for ms in [978_307_260_123, 978_307_260_000, 0, -1] {
            let text = format_timestamp_millis(ms);
            assert!(text.ends_with('Z') && text.len() == 24, "{text}");
            assert_eq!(
                parse_text(&text, FieldType::Timestamp).ok(),
                Some(Value::Timestamp(ms))
            );
        }
        assert_eq!(
            format_timestamp_millis(978_307_260_123),
            "2001-01-01T00:01:00.123Z"
        );
    }

    #[test]
    fn timestamps_parse_in_the_documented_forms() {
        let want = Value::Timestamp(978_307_260_000);
        for t in [
            "2001-01-01T00:01:00",
            "2001-01-01 00:01",
            "2001/01/01 00:01",
            "2001-01-01T00:01:00Z",
        ] {
            assert_eq!(parse_text(t, FieldType::Timestamp), Ok(want.clone()), "{t}");
        }
        assert_eq!(format_timestamp(978_307_260_000), "2001-01-01T00:01:00");
    }

    #[test]
    fn the_plain_form_parses_and_formats_as_chrono_does() {
        let chrono_text = |ms: i64| {
            chrono::DateTime::from_timestamp_millis(ms)
                .unwrap()
                .naive_utc()
                .format("%Y-%m-%dT%H:%M:%S")
                .to_string()
        };
        // Seconds spread over years 1 to 9999, leap days included.
        let mut ms = MIN_TIMESTAMP_MS;
        while ms < MAX_TIMESTAMP_MS {
            let text = format_timestamp(ms);
            assert_eq!(text, chrono_text(ms));
            let second = ms.div_euclid(1000) * 1000;
            assert_eq!(parse_plain_timestamp(&text), Some(second), "{text}");
            assert_eq!(parse_plain_timestamp(&text.replace('T', " ")), Some(second));
            ms += 86_399_997 * 7 + 1_013;
        }
        for bad in [
            "2001-02-29T00:00:00",
            "2001-01-01T24:00:00",
            "2001-01-01T00:00:0x",
        ] {
            assert_eq!(parse_plain_timestamp(bad), None, "{bad}");
            assert!(parse_text(bad, FieldType::Timestamp).is_err(), "{bad}");
        }
        // Other forms are left to chrono.
        assert_eq!(parse_plain_timestamp("+001-01-01T00:00:00"), None);
    }

    #[test]
    fn timestamps_outside_years_1_to_9999_are_refused() {
        for t in [
            "-9223372036854775808",
            "9223372036854775807",
            "253402300800000",
        ] {
            let e = parse_text(t, FieldType::Timestamp).unwrap_err();
            assert!(e.contains("outside the supported range"), "{t}: {e}");
        }
        assert_eq!(
            parse_text("253402300799999", FieldType::Timestamp),
            Ok(Value::Timestamp(MAX_TIMESTAMP_MS))
        );
        assert_eq!(format_timestamp(MIN_TIMESTAMP_MS), "0001-01-01T00:00:00");
    }

    #[test]
    fn bad_text_names_the_value() {
        assert_eq!(
            parse_text("abc", FieldType::Int64),
            Err("'abc' is not an integer".to_owned())
        );
        assert_eq!(parse_text("", FieldType::Int64), Ok(Value::Null));
    }
}
