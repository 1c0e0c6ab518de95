//! Engine exactness on the real catalogue models: Qwen2.5-Coder 1.5B Instruct (Q4_K_M) as the
//! target, drafted by context copies and by Qwen2.5-Coder 0.5B Instruct. For code and chat
//! prompts, greedy and sampled, every drafted reply equals its serial twin token for token, and
//! eight concurrent requests each equal their solo runs.
//!
//! The models are never committed: `scripts/fetch-test-models` puts them in
//! `$TENSORFOLD_CACHE/models` (default `~/.cache/tensorfold/models`). A missing file fails.

use serde_json::json;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tf_core::TokenId;
use tf_engine::cost::CostModel;
use tf_engine::proposer::DraftModel;
use tf_engine::{Engine, EngineConfig, ModelRunner, Request, Runner, SamplingParams};
use tf_kernels::ThreadPool;
use tf_models::Model;
use tf_text::{ChatTemplate, Tokenizer};

mod common;
use common::{run_all, Bench, Run};

const TARGET: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";
const DRAFT: &str = "qwen2.5-coder-0.5b-instruct.gguf";
/// Reply length of every request.
const MAX_TOKENS: usize = 64;
/// KV room: eight concurrent requests of up to ~300 slots each.
const KV_POSITIONS: usize = 4096;
const CONTEXT: usize = 4096;
/// Guesses per round at least: every drafted round verifies 3+ rows.
const MIN_DRAFTS: usize = 2;

/// `$TENSORFOLD_CACHE/models/<file>`, else `~/.cache/tensorfold/models/<file>`.
fn model_path(file: &str) -> PathBuf {
    let dir = match std::env::var_os("TENSORFOLD_CACHE") {
        Some(cache) => PathBuf::from(cache).join("models"),
        None => {
            let home = std::env::var_os("HOME").expect("HOME is set");
            PathBuf::from(home).join(".cache/tensorfold/models")
        }
    };
    let path = dir.join(file);
    assert!(
        path.exists(),
        "test model {} is missing: run scripts/fetch-test-models (or set TENSORFOLD_CACHE)",
        path.display()
    );
    path
}

/// Raw completion prompts: Python source cut off mid-function (with the repetition real code
/// has, so copies find matches).
const CODE: [&str; 3] = [
    r#"import math


def mean(values):
    """The arithmetic mean of values."""
    return sum(values) / len(values)


def variance(values):
    """The population variance of values."""
    m = mean(values)
    return sum((v - m) ** 2 for v in values) / len(values)


def stddev(values):
    """The population standard deviation of values."""
"#,
    r#"class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        if not self.items:
            raise IndexError("pop from an empty stack")
        return self.items.pop()

    def peek(self):
"#,
    r#"def parse_args(argv):
    options = {"verbose": False, "output": None, "count": 1}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--verbose":
            options["verbose"] = True
        elif arg == "--output":
            options["output"] = argv[i + 1]
            i += 1
        elif arg == "--count":
"#,
];

/// Chat questions.
const CHAT: [&str; 3] = [
    "Write a Python function that checks whether a string is a palindrome, ignoring case and \
     punctuation.",
    "Explain the difference between a list and a tuple in Python, with a short example of each.",
    "How do I read a CSV file in Python and sum the values of its second column?",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Code,
    Chat,
}

#[derive(Clone, Copy, Debug)]
struct Cell {
    kind: Kind,
    sampled: bool,
}

const CELLS: [Cell; 4] = [
    Cell {
        kind: Kind::Code,
        sampled: true,
    },
    Cell {
        kind: Kind::Chat,
        sampled: true,
    },
    Cell {
        kind: Kind::Code,
        sampled: false,
    },
    Cell {
        kind: Kind::Chat,
        sampled: false,
    },
];

struct Case {
    name: String,
    req: Request,
}

/// The 4 cells x 3 seeds; each seed its own prompt.
fn cases(tok: &Tokenizer) -> Vec<Case> {
    let template = ChatTemplate::new(
        tok.chat_template().expect("the target has a chat template"),
        tok.bos_token_text(),
        tok.eos_token_text(),
    )
    .unwrap();
    let mut out = Vec::new();
    for cell in CELLS {
        for seed in 0..3usize {
            let mut prompt: Vec<TokenId> = Vec::new();
            if tok.add_bos() {
                prompt.extend(tok.bos_id());
            }
            match cell.kind {
                Kind::Code => prompt.extend(tok.encode(CODE[seed], false).unwrap()),
                Kind::Chat => {
                    let messages = [json!({"role": "user", "content": CHAT[seed]})];
                    let text = template
                        .render(&messages, None, true, &serde_json::Map::new())
                        .unwrap();
                    prompt.extend(tok.encode(&text, true).unwrap());
                }
            }
            let mut req = Request::new(prompt, MAX_TOKENS);
            req.stop_tokens = tok.eog_ids().to_vec();
            if cell.sampled {
                req.params = SamplingParams {
                    temperature: 0.8,
                    top_k: 40,
                    top_p: 0.95,
                    seed: Some(1 + seed as u64),
                    ..SamplingParams::greedy()
                };
            }
            let mode = if cell.sampled { "sampled" } else { "greedy" };
            out.push(Case {
                name: format!("{:?} {mode} seed {seed}", cell.kind).to_lowercase(),
                req,
            });
        }
    }
    out
}

fn bench(
    target: &Arc<Model>,
    draft: Option<&Arc<Model>>,
    pool: &Arc<ThreadPool>,
    config: EngineConfig,
) -> Bench {
    let runner = ModelRunner::new(target.clone(), pool.clone(), KV_POSITIONS, CONTEXT);
    let blocks = runner.kv_blocks();
    let mut engine = Engine::new(Box::new(runner), config, CostModel::flat());
    if let Some(d) = draft {
        engine.add_draft_model(Box::new(DraftModel::new(d.clone(), pool.clone(), blocks)));
    }
    Bench { engine, blocks }
}

fn drafted_config() -> EngineConfig {
    EngineConfig {
        min_drafts: MIN_DRAFTS,
        ..EngineConfig::default()
    }
}

fn assert_drafted(run: &Run, want: &Run, what: &str) {
    assert_eq!(
        run.receipt.token_sha, want.receipt.token_sha,
        "{what}: the drafted reply differs from the serial one\n  drafted: {:?}\n  serial:  {:?}",
        run.tokens, want.tokens
    );
    assert_eq!(run.tokens, want.tokens, "{what}");
    assert_eq!(run.receipt.finish, want.receipt.finish, "{what}");
    if run.receipt.rounds > 0 {
        assert!(
            run.receipt.min_rows > MIN_DRAFTS,
            "{what}: min_drafts {MIN_DRAFTS} but a round verified {} row(s)",
            run.receipt.min_rows
        );
    }
}

#[test]
fn real_models_drafted_equals_serial_and_concurrent_equals_solo() {
    let start = Instant::now();
    let target = Arc::new(Model::load(&model_path(TARGET)).unwrap());
    let draft = Arc::new(Model::load(&model_path(DRAFT)).unwrap());
    assert_eq!(
        target.config.vocab, draft.config.vocab,
        "draft and target vocabularies"
    );
    let tok = Tokenizer::from_gguf(target.gguf().unwrap()).unwrap();
    let cases = cases(&tok);
    let pool = Arc::new(ThreadPool::new(2));

    // Serial references: one request at a time, each a window of one row every round.
    let t = Instant::now();
    let mut serial = bench(
        &target,
        None,
        &pool,
        EngineConfig {
            drafts: false,
            ..EngineConfig::default()
        },
    );
    let want: Vec<Run> = cases
        .iter()
        .map(|c| {
            run_all(&mut serial, vec![(0, c.req.clone())])
                .pop()
                .unwrap()
        })
        .collect();
    drop(serial);
    for (c, w) in cases.iter().zip(&want) {
        assert!(
            w.receipt.rounds == 0 || w.receipt.min_rows == 1,
            "{}",
            c.name
        );
        eprintln!(
            "{:<20} {} prompt {:>3} reply {:>2} {:?}: {:?}",
            c.name,
            w.receipt.token_sha,
            w.receipt.prompt_tokens,
            w.receipt.completion_tokens,
            w.receipt.finish,
            tok.decode(&w.tokens, false)
                .chars()
                .take(60)
                .collect::<String>()
        );
    }
    eprintln!("serial: {:.1}s", t.elapsed().as_secs_f64());

    // Drafted, one at a time: copies and the 0.5B draft model, 2+ guesses every round.
    let t = Instant::now();
    let mut drafted = bench(&target, Some(&draft), &pool, drafted_config());
    let (mut rounds, mut tokens) = (0, 0);
    let mut by_source: HashMap<&str, (usize, usize)> = HashMap::new();
    for (c, w) in cases.iter().zip(&want) {
        let run = run_all(&mut drafted, vec![(0, c.req.clone())])
            .pop()
            .unwrap();
        assert_drafted(&run, w, &c.name);
        rounds += run.receipt.rounds;
        tokens += run.receipt.completion_tokens;
        for s in &run.receipt.sources {
            let e = by_source.entry(s.name()).or_default();
            e.0 += s.drafted;
            e.1 += s.accepted;
        }
    }
    drop(drafted);
    eprintln!(
        "drafted: {:.1}s, {tokens} tokens in {rounds} rounds; (drafted, accepted) by source: \
         {by_source:?}",
        t.elapsed().as_secs_f64()
    );
    let used = |prefix: &str| {
        by_source
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .fold((0, 0), |(d, a), (_, &(sd, sa))| (d + sd, a + sa))
    };
    for prefix in ["copies", "draft-model"] {
        let (d, a) = used(prefix);
        assert!(d > 0 && a > 0, "{prefix}: {a} of {d} guesses accepted");
    }

    // Eight at once, mixed cells, arriving at different steps; prompts prefilled in chunks
    // beside the others' windows.
    let t = Instant::now();
    let mut concurrent = bench(
        &target,
        Some(&draft),
        &pool,
        EngineConfig {
            max_step_rows: 48,
            ..drafted_config()
        },
    );
    let picks = [0usize, 3, 6, 9, 1, 4, 8, 11];
    let arrivals = [0usize, 0, 1, 3, 6, 10, 15, 21];
    let reqs = picks
        .iter()
        .zip(arrivals)
        .map(|(&i, at)| (at, cases[i].req.clone()))
        .collect();
    let runs = run_all(&mut concurrent, reqs);
    for (&i, run) in picks.iter().zip(&runs) {
        let what = format!("{} (concurrent)", cases[i].name);
        assert_drafted(run, &want[i], &what);
    }
    eprintln!(
        "concurrent: {:.1}s; total {:.1}s",
        t.elapsed().as_secs_f64(),
        start.elapsed().as_secs_f64()
    );
}
