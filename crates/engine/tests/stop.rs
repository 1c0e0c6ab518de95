//! A reply ended by the client after some of its tokens (a stop string matched): the engine
//! drops the tokens past them, and the receipt covers exactly the reply.

mod common;

use common::*;
use tf_engine::{token_sha, Event, FinishReason};
use tokio::sync::mpsc::unbounded_channel;

#[test]
fn a_reply_stopped_at_a_token_gets_a_receipt_of_exactly_those_tokens() {
    let pair = pairs(CENTRED).swap_remove(0);
    let mut b = bench(
        &pair.target,
        Some(&pair.draft),
        2,
        drafting(2),
        KV_POSITIONS,
    );
    let mut req = request(5, true, 30, 60);
    req.ignore_eos = true;
    let (tx, mut rx) = unbounded_channel();
    let id = b.engine.submit(req, tx).unwrap();
    let mut tokens = Vec::new();
    while tokens.len() < 10 {
        b.engine.step().unwrap();
        while let Ok(ev) = rx.try_recv() {
            if let Event::Tokens(t) = ev {
                tokens.extend(t);
            }
        }
    }
    // The client keeps the first 7 (its stop string ended inside the 7th).
    b.engine.stop_at(id, 7);
    while !b.engine.is_idle() {
        b.engine.step().unwrap();
    }
    let mut receipt = None;
    while let Ok(ev) = rx.try_recv() {
        if let Event::Done(r) = ev {
            receipt = Some(r);
        }
    }
    let r = receipt.expect("a receipt");
    assert_eq!(r.completion_tokens, 7);
    assert_eq!(r.token_sha, token_sha(&tokens[..7]));
    assert_eq!(r.finish, FinishReason::Stop);
    assert_eq!(b.engine.free_blocks(), b.blocks, "KV blocks leaked");
}
