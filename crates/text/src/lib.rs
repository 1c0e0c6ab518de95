//! tf-text: everything between bytes of text and token ids.
//!
//! - [`Tokenizer`]: GGUF (`gpt2` byte-level BPE, `llama` SentencePiece) and Hugging Face
//!   `tokenizer.json` vocabularies; encode with or without special-token parsing, decode,
//!   special and end-of-generation tokens, the model's chat template text.
//! - [`StreamDecoder`]: token ids in, complete UTF-8 text out, one stream at a time.
//! - [`ChatTemplate`]: a model's Jinja chat template rendered exactly as Hugging Face
//!   transformers renders it.
//!
//! Python is used only to generate test fixtures (scripts/gen_text_fixtures.py), never at run
//! time.

mod error;
mod stream;
mod template;
mod tokenizer;

pub use error::{Result, TextError};
pub use stream::StreamDecoder;
pub use template::ChatTemplate;
pub use tokenizer::{TokenKind, Tokenizer};
