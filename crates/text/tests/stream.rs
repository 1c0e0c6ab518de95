//! StreamDecoder: never emits half a character, replaces never-valid bytes where
//! `from_utf8_lossy` would, flushes an incomplete tail at `finish`, and always adds up to
//! `Tokenizer::decode` of the whole sequence.

mod common;

use tf_text::{StreamDecoder, Tokenizer};

/// Id of the `<0xNN>` token in the tiny SentencePiece vocabulary.
fn byte(b: u8) -> u32 {
    5 + u32::from(b)
}

fn pieces(tok: &Tokenizer, ids: &[u32], skip_special: bool) -> (Vec<String>, String) {
    let mut stream = StreamDecoder::new(skip_special);
    let parts: Vec<String> = ids.iter().map(|&id| stream.push(tok, id)).collect();
    (parts, stream.finish())
}

fn assert_stream_matches_decode(tok: &Tokenizer, ids: &[u32], skip_special: bool) {
    let (parts, tail) = pieces(tok, ids, skip_special);
    assert_eq!(
        parts.concat() + &tail,
        tok.decode(ids, skip_special),
        "{ids:?}"
    );
}

#[test]
fn multi_byte_characters_split_across_byte_tokens() {
    let tok = common::tiny_spm();
    // é (2 bytes), 日 (3 bytes, here as bytes rather than its token), 😀 (4 bytes).
    let text = "é日😀";
    let ids: Vec<u32> = text.bytes().map(byte).collect();
    let (parts, tail) = pieces(&tok, &ids, false);
    assert_eq!(parts, ["", "é", "", "", "日", "", "", "", "😀"]);
    assert_eq!(tail, "");
    assert_eq!(tok.decode(&ids, false), text);
    assert_stream_matches_decode(&tok, &ids, false);
}

#[test]
fn incomplete_tail_is_flushed_lossily() {
    let tok = common::tiny_spm();
    let ids = [byte(b'a'), byte(0xF0), byte(0x9F)];
    let mut stream = StreamDecoder::new(false);
    assert_eq!(stream.push_all(&tok, &ids), "a");
    assert_eq!(stream.pending_bytes(), [0xF0, 0x9F]);
    assert_eq!(stream.finish(), "\u{FFFD}");
    assert_eq!(tok.decode(&ids, false), "a\u{FFFD}");
    assert!(stream.pending_bytes().is_empty());
}

#[test]
fn invalid_bytes_are_replaced_immediately() {
    let tok = common::tiny_spm();
    // A lone continuation byte, an interrupted sequence, then valid text.
    let ids = [byte(0x80), byte(0xE6), byte(b'x'), byte(0xC3), byte(0xA9)];
    let (parts, tail) = pieces(&tok, &ids, false);
    assert_eq!(parts, ["\u{FFFD}", "", "\u{FFFD}x", "", "é"]);
    assert_eq!(tail, "");
    assert_stream_matches_decode(&tok, &ids, false);
}

#[test]
fn special_tokens_follow_skip_special() {
    let tok = common::tiny_spm();
    let mut ids = tok.encode("hello<|im_end|><think>日", true).unwrap();
    ids.insert(1, byte(0xE6)); // split a character around a control token
    for skip in [false, true] {
        assert_stream_matches_decode(&tok, &ids, skip);
    }
    let (parts, tail) = pieces(&tok, &tok.encode("<|im_end|>", true).unwrap(), true);
    assert_eq!(parts.concat() + &tail, "");
}

#[test]
fn real_vocabularies_split_emoji_and_cjk() {
    for file in [common::QWEN_0_5B, common::SMOLLM2] {
        let tok = common::model_tokenizer(file);
        let text = "Emoji 😀🎉👩‍👩‍👧 and 日本語のテキスト, 한국어, ελληνικά — done";
        let ids = tok.encode(text, false).unwrap();
        let (parts, tail) = pieces(&tok, &ids, false);
        // Some token must end mid-character for this test to mean anything.
        assert!(
            parts.iter().any(String::is_empty),
            "{file}: no split character"
        );
        assert!(
            parts.iter().all(|p| !p.contains('\u{FFFD}')),
            "{file}: {parts:?}"
        );
        assert_eq!(parts.concat() + &tail, text, "{file}");
        assert_stream_matches_decode(&tok, &ids, false);
    }
}
