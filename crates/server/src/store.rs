//! Stored responses (`store: true`, the default): in memory, bounded by count and bytes, least
//! recently used first out. Each entry keeps the response object and the conversation it ended
//! (its input and output as template messages, without instructions), which is what a later
//! `previous_response_id` continues from.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;

struct Entry {
    response: Value,
    conversation: Vec<Value>,
    bytes: usize,
    last_used: u64,
}

struct Inner {
    entries: HashMap<String, Entry>,
    bytes: usize,
    tick: u64,
}

pub struct ResponseStore {
    max_count: usize,
    max_bytes: usize,
    inner: Mutex<Inner>,
}

fn size_of(response: &Value, conversation: &[Value]) -> usize {
    response.to_string().len()
        + conversation
            .iter()
            .map(|m| m.to_string().len())
            .sum::<usize>()
}

impl ResponseStore {
    pub fn new(max_count: usize, max_bytes: usize) -> ResponseStore {
        ResponseStore {
            max_count,
            max_bytes,
            inner: Mutex::new(Inner {
                entries: HashMap::new(),
                bytes: 0,
                tick: 0,
            }),
        }
    }

    /// Stores a response; older ones leave when the bounds are passed. An entry larger than the
    /// whole byte budget is not stored.
    pub fn insert(&self, id: String, response: Value, conversation: Vec<Value>) {
        let bytes = size_of(&response, &conversation);
        if bytes > self.max_bytes || self.max_count == 0 {
            return;
        }
        let mut inner = self.inner.lock().unwrap();
        inner.tick += 1;
        let tick = inner.tick;
        if let Some(old) = inner.entries.insert(
            id,
            Entry {
                response,
                conversation,
                bytes,
                last_used: tick,
            },
        ) {
            inner.bytes -= old.bytes;
        }
        inner.bytes += bytes;
        while inner.entries.len() > self.max_count || inner.bytes > self.max_bytes {
            let oldest = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone());
            let Some(key) = oldest else { break };
            if let Some(e) = inner.entries.remove(&key) {
                inner.bytes -= e.bytes;
            }
        }
    }

    /// The response object and its conversation; counts as a use.
    pub fn get(&self, id: &str) -> Option<(Value, Vec<Value>)> {
        let mut inner = self.inner.lock().unwrap();
        inner.tick += 1;
        let tick = inner.tick;
        let e = inner.entries.get_mut(id)?;
        e.last_used = tick;
        Some((e.response.clone(), e.conversation.clone()))
    }

    pub fn delete(&self, id: &str) -> bool {
        let mut inner = self.inner.lock().unwrap();
        match inner.entries.remove(id) {
            Some(e) => {
                inner.bytes -= e.bytes;
                true
            }
            None => false,
        }
    }

    pub fn len(&self) -> usize {
        self.inner.lock().unwrap().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn count_bound_evicts_least_recently_used() {
        let s = ResponseStore::new(2, 1 << 20);
        s.insert("a".into(), json!(1), vec![]);
        s.insert("b".into(), json!(2), vec![]);
        assert!(s.get("a").is_some()); // a is now newer than b
        s.insert("c".into(), json!(3), vec![]);
        assert!(s.get("b").is_none());
        assert!(s.get("a").is_some() && s.get("c").is_some());
    }

    #[test]
    fn byte_bound_holds_and_oversized_entries_are_skipped() {
        let s = ResponseStore::new(100, 40);
        let big = json!("x".repeat(100));
        s.insert("big".into(), big, vec![]);
        assert!(s.is_empty());
        for i in 0..10 {
            s.insert(format!("{i}"), json!("0123456789"), vec![]);
        }
        assert!(s.len() <= 3, "{} entries", s.len());
        assert!(s.get("9").is_some());
        assert!(s.delete("9"));
        assert!(!s.delete("9"));
    }
}
