//! GGUF files: the reader, the tokenizer and the model loader behind it. A mutated file must be
//! refused with an error (or load), never panic, abort on a huge allocation or hang.

use tf_weights::GgufFile;

use crate::Target;

pub struct Gguf;

impl Target for Gguf {
    fn name(&self) -> &'static str {
        "gguf"
    }

    fn seeds(&self) -> Vec<Vec<u8>> {
        [
            "llama", "qwen2", "qwen3", "gemma3", "phi3", "qwen3moe", "olmoe",
        ]
        .iter()
        .filter_map(|f| std::fs::read(super::family_fixtures().join(f).join("model.gguf")).ok())
        .collect()
    }

    fn run(&self, input: &[u8]) -> Result<(), String> {
        let Ok(g) = GgufFile::from_bytes(input.to_vec(), "fuzz.gguf") else {
            return Ok(());
        };
        let _ = tf_text::Tokenizer::from_gguf(&g);
        let _ = tf_models::Model::from_gguf(g);
        Ok(())
    }
}
