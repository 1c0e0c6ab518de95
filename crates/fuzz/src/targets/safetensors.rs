//! Hugging Face model folders: `config.json` and `model.safetensors` (header and data) through
//! the model loader. An input packs both files (`mutate::pack`); each run writes them to a
//! fresh folder.

use std::path::PathBuf;

use crate::mutate::{pack, unpack, Mutator};
use crate::Target;

pub struct Safetensors {
    dir: PathBuf,
}

impl Safetensors {
    pub fn new() -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("tf-fuzz-safetensors-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Safetensors { dir })
    }
}

impl Drop for Safetensors {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Target for Safetensors {
    fn name(&self) -> &'static str {
        "safetensors"
    }

    fn seeds(&self) -> Vec<Vec<u8>> {
        ["llama", "qwen2", "gemma3", "phi3", "mixtral", "gpt-oss"]
            .iter()
            .filter_map(|f| {
                let hf = super::family_fixtures().join(f).join("hf");
                let config = std::fs::read(hf.join("config.json")).ok()?;
                let weights = std::fs::read(hf.join("model.safetensors")).ok()?;
                Some(pack(&[&config, &weights]))
            })
            .collect()
    }

    fn mutate(&self, m: &mut Mutator, input: &[u8], other: &[u8]) -> Vec<u8> {
        let parts = unpack(input, 2);
        // Half the time a structural edit of config.json, else bytes of either file.
        if m.rng.chance(0.5) {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(parts[0]) {
                let config = serde_json::to_vec(&m.json(&v)).unwrap_or_default();
                return pack(&[&config, parts[1]]);
            }
        }
        if m.rng.chance(0.5) {
            pack(&[&m.bytes(parts[0], &[]), parts[1]])
        } else {
            pack(&[parts[0], &m.bytes(parts[1], unpack(other, 2)[1])])
        }
    }

    fn run(&self, input: &[u8]) -> Result<(), String> {
        let parts = unpack(input, 2);
        let write = |name: &str, b: &[u8]| std::fs::write(self.dir.join(name), b);
        write("config.json", parts[0]).map_err(|e| e.to_string())?;
        write("model.safetensors", parts[1]).map_err(|e| e.to_string())?;
        let _ = tf_models::Model::load(&self.dir);
        Ok(())
    }
}
