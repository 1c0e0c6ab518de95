//! `tensorfold bench --url URL`: the engine cells of `cells.rs` on an OpenAI-compatible server,
//! streamed over HTTP, with the same prompts, seeds, reply lengths, warm-up and runs, timed as a
//! client sees them; the table adds the median time to first token.
//!
//! Chat cells send their messages to `/v1/chat/completions` (the server applies its chat
//! template), code cells their raw prompt to `/v1/completions`. A TensorFold server names each
//! reply's tokens in its final chunk (`tensorfold.token_sha`); there every run is served twice,
//! drafted (the default) and with `"draft": false`, and each drafted reply is checked against its
//! serial twin. Other servers are measured in their default mode only, exactness `n/a`.

use anyhow::Result;
use serde_json::{json, Value};

use super::args::{fmt_runs, BenchArgs};
use super::sse::{Reply, Server};
use crate::cells::{self, median, speed_columns, Cell, Plan};

pub fn run(args: &BenchArgs, url: &str) -> Result<()> {
    let plan = Plan::new(args)?;
    let server = Server::new(url, args.api_key.clone())?;
    let model = match &args.served_model {
        Some(name) => name.clone(),
        None => server.first_model()?,
    };
    eprintln!(
        "bench: {} (model {model}); 1 warm-up + {} runs per cell and length",
        server.base(),
        plan.runs
    );
    let one = |cell: Cell, i: usize, n: usize, draft: bool| -> Result<Reply> {
        let path = if cell.chat() {
            "/v1/chat/completions"
        } else {
            "/v1/completions"
        };
        let reply = server.stream(path, &body(cell, i, n, &model, draft))?;
        if reply.tokens != n {
            eprintln!(
                "  note: {} {n}: prompt {i} got {} tokens (ignore_eos not honoured?)",
                cell.name(),
                reply.tokens
            );
        }
        Ok(reply)
    };
    // Only a TensorFold server (it sends token_sha) gets the serial twin.
    let pair = |cell: Cell, i: usize, n: usize| -> Result<(Reply, Option<Reply>)> {
        let drafted = one(cell, i, n, true)?;
        let serial = match drafted.token_sha {
            Some(_) => Some(one(cell, i, n, false)?),
            None => None,
        };
        Ok((drafted, serial))
    };
    let mut header = false;
    plan.measure(pair, |cell, n, pairs| {
        let twins = pairs.iter().all(|(_, s)| s.is_some());
        if !header {
            let first = if twins { "drafted tok/s" } else { "tok/s" };
            println!("| cell | tokens | {first} | serial tok/s | speedup | exact | TTFT ms |");
            println!("|---|---|---|---|---|---|---|");
            header = true;
        }
        let mut tps: Vec<f64> = pairs.iter().map(|(d, _)| d.decode_tps).collect();
        let mut ttft: Vec<f64> = pairs.iter().map(|(d, _)| d.ttft * 1e3).collect();
        eprintln!(
            "  {} {n}: tok/s {}; TTFT ms {}",
            cell.name(),
            fmt_runs(&tps),
            fmt_runs(&ttft)
        );
        let mut serial: Vec<f64> = pairs
            .iter()
            .flat_map(|(_, s)| s)
            .map(|s| s.decode_tps)
            .collect();
        let exact = pairs
            .iter()
            .filter(|(d, s)| s.as_ref().is_some_and(|s| s.token_sha == d.token_sha))
            .count();
        println!(
            "{} | {:.1} |",
            speed_columns(cell, n, &mut tps, twins.then_some((&mut serial, exact))),
            median(&mut ttft)
        );
        Ok(())
    })
}

/// The request body of prompt `i` of `cell`: the in-process cell's request, in OpenAI terms.
fn body(cell: Cell, i: usize, n: usize, model: &str, draft: bool) -> Value {
    let p = cell.params(i);
    let mut body = json!({
        "model": model,
        "max_tokens": n,
        "stream": true,
        "stream_options": {"include_usage": true},
        "ignore_eos": true,
        "temperature": decimal(p.temperature),
        "top_p": decimal(p.top_p),
        "top_k": p.top_k,
        "min_p": decimal(p.min_p),
    });
    if let Some(seed) = p.seed {
        body["seed"] = seed.into();
    }
    if cell.chat() {
        body["messages"] = json!([{"role": "user", "content": cell.text(i)}]);
        body["chat_template_kwargs"] = cells::template_kwargs().into();
    } else {
        body["prompt"] = cell.text(i).into();
    }
    if !draft {
        body["draft"] = false.into();
    }
    body
}

/// `x` as its shortest decimal (0.8, not 0.800000011920929).
fn decimal(x: f32) -> Value {
    x.to_string()
        .parse::<f64>()
        .map_or(Value::Null, Value::from)
}
