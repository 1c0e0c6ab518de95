//! Tokenizers: any text (bytes, lossily UTF-8) encoded with and without special-token parsing,
//! any ids decoded, through the real vocabularies of the test cache (Qwen2.5's and SmolLM2's
//! byte-level BPE) and the family fixtures' small ones (BPE and SentencePiece). Besides never
//! panicking, Qwen2.5's, which has a token for every byte, must give the text back: decoding
//! what plain-text encoding made returns the same string. (SmolLM2's vocabulary lacks a few
//! control bytes, 0x04 and 0x1D among them, so its encoder drops them, as Hugging Face's does.)

use tf_text::Tokenizer;
use tf_weights::GgufFile;

use crate::Target;

pub struct Tokenizers {
    /// (name, tokenizer, whether decode(encode(text)) must equal text)
    all: Vec<(String, Tokenizer, bool)>,
}

fn load(path: &std::path::Path) -> anyhow::Result<Tokenizer> {
    Ok(Tokenizer::from_gguf(&GgufFile::open(path)?)?)
}

impl Tokenizers {
    pub fn new() -> anyhow::Result<Self> {
        let mut all = vec![
            (
                "qwen2.5".to_string(),
                load(&super::cached_model("qwen2.5-coder-0.5b-instruct.gguf")?)?,
                true,
            ),
            (
                "smollm2".to_string(),
                load(&super::cached_model("smollm2-135m-instruct-q4_1.gguf")?)?,
                false,
            ),
        ];
        for f in ["qwen2", "gemma3", "phi3"] {
            let path = super::family_fixtures().join(f).join("model.gguf");
            all.push((f.to_string(), load(&path)?, false));
        }
        Ok(Tokenizers { all })
    }
}

impl Target for Tokenizers {
    fn name(&self) -> &'static str {
        "tokenizer"
    }

    fn seeds(&self) -> Vec<Vec<u8>> {
        [
            "Hello, world!",
            "fn main() {\n    println!(\"{}\", 1 + 2);\n}\n",
            "  leading spaces, tabs\t\tand\r\nnewlines\n\n\n",
            "<|im_start|>user\nhi<|im_end|>\n<|endoftext|><s></s>",
            "é文🙂 ﬁ Ⅻ \u{200b}\u{feff} ÅÅ",
            "1234567890 3.14159 -0.0 1e-9",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect()
    }

    fn run(&self, input: &[u8]) -> Result<(), String> {
        let text = String::from_utf8_lossy(input);
        let ids: Vec<u32> = input
            .chunks(4)
            .map(|c| c.iter().fold(0u32, |a, &b| (a << 8) | b as u32))
            .collect();
        for (name, tok, round_trips) in &self.all {
            let _ = tok.encode(&text, true);
            let _ = tok.decode(&ids, false);
            let _ = tok.decode(&ids, true);
            if let Ok(plain) = tok.encode(&text, false) {
                let back = tok.decode(&plain, false);
                if *round_trips && back != text {
                    return Err(format!(
                        "{name}: decode(encode(text)) != text: {:?} became {:?}",
                        text, back
                    ));
                }
            }
        }
        Ok(())
    }
}
