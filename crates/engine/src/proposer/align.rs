//! How a copy lines up with what it copies: from a matched suffix, walk back through the
//! earlier text and the recent text together while they agree, stepping over small differences
//! (an edit's renamed identifier, a changed literal) where the two resume agreeing right after.
//! The differences found are substitutions the reply has been making ("`add` became `insert`
//! before `_item`"); applied to the copied continuation, they predict the same edit where the
//! copied text meets the same words again.

use tf_core::TokenId;

/// Tokens followed back at most (bounds the cost per candidate).
pub const MAX_WALK: usize = 512;
/// The differences stepped over (`s1` earlier tokens against `s2` recent ones, at most two on
/// either side), smallest first and, among equal sizes, substitutions of equal lengths first.
const SKIPS: [(usize, usize); 8] = [
    (0, 1),
    (1, 0),
    (1, 1),
    (0, 2),
    (2, 0),
    (1, 2),
    (2, 1),
    (2, 2),
];
/// Tokens that must agree after a difference for the walk to go on past it.
const RESYNC: usize = 4;
/// Substitutions kept per alignment (the nearest first).
const MAX_SUBS: usize = 8;

/// The earlier text `from` became `to` in the recent text, just before `next` (in both).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sub {
    pub from: Vec<TokenId>,
    pub to: Vec<TokenId>,
    pub next: TokenId,
}

/// What walking back from a match found: the tokens that agree (differences not counted) and
/// the substitutions stepped over, nearest first.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Alignment {
    pub agree: usize,
    pub subs: Vec<Sub>,
}

/// Walks back from earlier position `i` and recent position `j` (> `i`; `tokens[i]` and
/// `tokens[j]` start the match) for at most [`MAX_WALK`] tokens.
pub fn walk_back(tokens: &[TokenId], mut i: usize, mut j: usize) -> Alignment {
    let mut a = Alignment::default();
    let mut steps = 0;
    while i > 0 && j > i + 1 && steps < MAX_WALK {
        steps += 1;
        if tokens[i - 1] == tokens[j - 1] {
            a.agree += 1;
            i -= 1;
            j -= 1;
            continue;
        }
        let Some((s1, s2)) = resync(tokens, i, j) else {
            break;
        };
        if s1 > 0 && a.subs.len() < MAX_SUBS {
            let sub = Sub {
                from: tokens[i - s1..i].to_vec(),
                to: tokens[j - s2..j].to_vec(),
                next: tokens[i],
            };
            if !a.subs.contains(&sub) {
                a.subs.push(sub);
            }
        }
        i -= s1;
        j -= s2;
    }
    a
}

/// The first of [`SKIPS`] after which [`RESYNC`] tokens agree again.
fn resync(tokens: &[TokenId], i: usize, j: usize) -> Option<(usize, usize)> {
    SKIPS.into_iter().find(|&(s1, s2)| {
        i >= s1 + RESYNC
            && j >= s2 + RESYNC
            && j - s2 - RESYNC >= i - s1
            && (1..=RESYNC).all(|k| tokens[i - s1 - k] == tokens[j - s2 - k])
    })
}

/// Up to `max` tokens copied from `tokens[from..]`, with each substitution applied where its
/// earlier text recurs before the same next token.
pub fn continue_with(tokens: &[TokenId], from: usize, subs: &[Sub], max: usize) -> Vec<TokenId> {
    let n = tokens.len();
    let mut out = Vec::with_capacity(max);
    let mut x = from;
    while out.len() < max && x < n {
        let hit = subs.iter().find(|s| {
            let l = s.from.len();
            x + l < n && tokens[x..x + l] == s.from[..] && tokens[x + l] == s.next
        });
        match hit {
            Some(s) => {
                out.extend_from_slice(&s.to);
                x += s.from.len();
            }
            None => {
                out.push(tokens[x]);
                x += 1;
            }
        }
    }
    out.truncate(max);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rename_made_once_is_predicted_where_the_copy_meets_it_again() {
        // Earlier: "p q r def add _item ( x ) : return add _item ( y )"; the reply so far
        // renamed `add` to `ins` and has reached "p q r def ins _item ( x ) :".
        let (p, q, r, def, add, item, lp, x, rp, colon, ret, y, ins) =
            (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13);
        let mut t = vec![
            p, q, r, def, add, item, lp, x, rp, colon, ret, add, item, lp, y, rp,
        ];
        let reply_at = t.len();
        t.extend([p, q, r, def, ins, item, lp, x, rp, colon]);
        // The suffix "( x ) :" matched the earlier text at 6.
        let a = walk_back(&t, 6, reply_at + 6);
        assert_eq!(
            a.subs,
            vec![Sub {
                from: vec![add],
                to: vec![ins],
                next: item
            }]
        );
        // "_item", "def", "r", "q", "p" agree; the rename is not counted.
        assert_eq!(a.agree, 5);
        // Copying on from after ":" predicts the rename again.
        assert_eq!(
            continue_with(&t, 10, &a.subs, 6),
            vec![ret, ins, item, lp, y, rp]
        );
        // Without the substitutions the copy repeats the old name.
        assert_eq!(continue_with(&t, 10, &[], 2), vec![ret, add]);
    }

    #[test]
    fn differences_that_do_not_resume_end_the_walk() {
        // Nothing agrees before the match: no substitution, nothing counted.
        let t = [1, 2, 3, 4, 50, 51, 52, 53, 3, 4];
        assert_eq!(walk_back(&t, 2, 8), Alignment::default());
        // An inserted token in the reply is stepped over without a substitution.
        let t = [1, 2, 3, 4, 5, 6, 7, 90, 1, 2, 3, 4, 77, 5, 6, 7];
        let a = walk_back(&t, 4, 13);
        assert_eq!(a.agree, 4);
        assert!(a.subs.is_empty());
        // A substitution is applied only before its own next token.
        let s = Sub {
            from: vec![2],
            to: vec![20],
            next: 3,
        };
        assert_eq!(
            continue_with(&[2, 3, 2, 4], 0, std::slice::from_ref(&s), 4),
            vec![20, 3, 2, 4]
        );
        assert!(continue_with(&[1, 2], 2, std::slice::from_ref(&s), 4).is_empty());
    }
}
