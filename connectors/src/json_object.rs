//! A JSON object read straight into the slots of a [`Schema`]'s fields:
//! each key is looked up among the field names as it is read, without
//! building a map of every key (keys of no field are skipped unread).
//! For a Kafka topic of JSON values this halved the decoding's
//! allocations; the values themselves are `serde_json::Value`s, so that
//! what is wrong with one is reported as before.

use crate::row::Schema;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};

/// Per field of `schema`, the value its name has in the JSON object
/// `text` (`None`: absent; a repeated key: its last value).
///
/// Errors: `text` is not one JSON object (serde_json's message).
pub(crate) fn json_fields(
    text: &str,
    schema: &Schema,
) -> Result<Vec<Option<serde_json::Value>>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let slots = Fields(schema).deserialize(&mut de)?;
    de.end()?;
    Ok(slots)
}

struct Fields<'s>(&'s Schema);

impl<'de> DeserializeSeed<'de> for Fields<'_> {
    type Value = Vec<Option<serde_json::Value>>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Fields<'_> {
    type Value = Vec<Option<serde_json::Value>>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut slots = vec![None; self.0.fields.len()];
        while let Some(field) = map.next_key_seed(FieldIndex(self.0))? {
            match field {
                Some(i) => slots[i] = Some(map.next_value()?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(slots)
    }
}

/// A key, as the index of the field it names (`None`: no field).
struct FieldIndex<'s>(&'s Schema);

impl<'de> DeserializeSeed<'de> for FieldIndex<'_> {
    type Value = Option<usize>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for FieldIndex<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(self.0.fields.iter().position(|(name, _)| name == key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FieldType;

    #[test]
    fn fields_are_found_by_name_and_others_skipped() {
        let schema = Schema::new(&[("a", FieldType::Int64), ("b\"", FieldType::String)]);
        let slots = json_fields(r#"{"x":{"deep":[1]},"b\"":"t","a":1,"a":2}"#, &schema).unwrap();
        assert_eq!(slots, vec![Some(2.into()), Some("t".into())]);
        assert_eq!(json_fields("{}", &schema).unwrap(), vec![None, None]);
        for bad in ["[1]", "{\"a\":1} x", "{\"a\":", "1"] {
            let e = json_fields(bad, &schema).unwrap_err().to_string();
            assert!(!e.is_empty(), "{bad}");
        }
    }
}
