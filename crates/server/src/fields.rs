//! Parsing at the edge: typed, range-checked reads of request fields, each failure a 400 that
//! names the field. Requests are read as JSON objects (not derived structs) so that every wrong
//! type gets its own message and unknown fields are ignored, as OpenAI-compatible servers do.

use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};

/// A request body: a JSON object.
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
    /// Prefix for nested objects' field names in messages (`stream_options.include_usage`).
    prefix: String,
}

/// Parses a body into a JSON value: malformed JSON is a 400 saying where.
pub fn parse_body(bytes: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad_request(format!("the request body is not valid JSON: {e}"))
            .with_code("invalid_json")
    })
}

/// "a string", "an array", ...: for error messages.
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl<'a> Fields<'a> {
    pub fn new(body: &'a Value) -> ApiResult<Fields<'a>> {
        match body {
            Value::Object(map) => Ok(Fields {
                map,
                prefix: String::new(),
            }),
            other => Err(ApiError::bad_request(format!(
                "the request body must be a JSON object, got {}",
                type_name(other)
            ))),
        }
    }

    pub fn name(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn wrong(&self, key: &str, expected: &str, got: &Value) -> ApiError {
        let name = self.name(key);
        ApiError::invalid(
            &name,
            format!("'{name}' must be {expected}, got {}", type_name(got)),
        )
        .with_code("invalid_type")
    }

    /// The raw value; `null` counts as absent.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub fn object(&self, key: &str) -> ApiResult<Option<Fields<'a>>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Fields {
                map,
                prefix: format!("{}.", self.name(key)),
            })),
            Some(other) => Err(self.wrong(key, "an object", other)),
        }
    }

    pub fn map(&self, key: &str) -> ApiResult<Option<&'a Map<String, Value>>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(other) => Err(self.wrong(key, "an object", other)),
        }
    }

    pub fn array(&self, key: &str) -> ApiResult<Option<&'a Vec<Value>>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(other) => Err(self.wrong(key, "an array", other)),
        }
    }

    pub fn str(&self, key: &str) -> ApiResult<Option<&'a str>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.wrong(key, "a string", other)),
        }
    }

    pub fn bool(&self, key: &str) -> ApiResult<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.wrong(key, "a boolean", other)),
        }
    }

    /// A number within `[lo, hi]`.
    pub fn f32_in(&self, key: &str, lo: f64, hi: f64) -> ApiResult<Option<f32>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => {
                let x = n.as_f64().unwrap_or(f64::NAN);
                if !(lo..=hi).contains(&x) {
                    let name = self.name(key);
                    return Err(ApiError::invalid(
                        &name,
                        format!("'{name}' must be between {lo} and {hi}, got {x}"),
                    ));
                }
                Ok(Some(x as f32))
            }
            Some(other) => Err(self.wrong(key, "a number", other)),
        }
    }

    /// A non-negative integer no smaller than `min`.
    pub fn uint(&self, key: &str, min: u64) -> ApiResult<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => {
                let name = self.name(key);
                let Some(x) = n.as_u64().or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19)
                        .map(|f| f as u64)
                }) else {
                    return Err(ApiError::invalid(
                        &name,
                        format!("'{name}' must be a non-negative integer, got {n}"),
                    ));
                };
                if x < min {
                    return Err(ApiError::invalid(
                        &name,
                        format!("'{name}' must be at least {min}, got {x}"),
                    ));
                }
                Ok(Some(x))
            }
            Some(other) => Err(self.wrong(key, "an integer", other)),
        }
    }

    /// A string or a list of strings (`stop`).
    pub fn strings(&self, key: &str) -> ApiResult<Vec<String>> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(self.wrong(key, "a string or a list of strings", other)),
                })
                .collect(),
            Some(other) => Err(self.wrong(key, "a string or a list of strings", other)),
        }
    }

    pub fn raw(&self) -> &'a Map<String, Value> {
        self.map
    }
}
