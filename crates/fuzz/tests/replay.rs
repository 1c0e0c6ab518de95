//! Every fuzz target's seeds and kept findings (`crates/fuzz/crashes/TARGET/`) run once: each
//! finding, once fixed, stays fixed.

use tf_fuzz::{crashes_dir, files_in, target};

fn replay(name: &str) {
    let t = target(name).expect("the target loads");
    let mut inputs = t.seeds();
    assert!(!inputs.is_empty(), "{name} has seeds");
    for p in files_in(&crashes_dir(name)) {
        inputs.push(std::fs::read(&p).expect("a kept finding"));
    }
    for (i, input) in inputs.iter().enumerate() {
        if let Err(e) = t.run(input) {
            panic!("{name}: input {i}: {e}");
        }
    }
}

#[test]
fn gguf_inputs_pass() {
    replay("gguf");
}

#[test]
fn safetensors_inputs_pass() {
    replay("safetensors");
}

#[test]
fn template_inputs_pass() {
    replay("template");
}

#[test]
fn tokenizer_inputs_pass() {
    replay("tokenizer");
}

#[test]
fn request_inputs_pass() {
    replay("requests");
}
