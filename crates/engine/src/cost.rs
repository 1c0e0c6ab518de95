//! Window sizing by cost: how long a forward of r rows takes (measured, refined as the engine
//! runs), how often each proposer's i-th guess is accepted (decaying averages), and from both the
//! number of drafts that maximizes expected committed tokens per second. When drafts stop paying,
//! the answer is zero: never slower than serial.

use crate::proposer::SourceId;
use std::collections::HashMap;
use tf_core::SeqId;

/// Longest draft window considered.
pub const MAX_DRAFT: usize = 16;
/// Most rows a step is sized for; beyond it the cost is extrapolated linearly.
const MAX_ROWS: usize = 256;
/// Weight of a new observation in the decaying averages: a few dozen windows of history.
const DECAY: f64 = 0.08;
/// Acceptance assumed before anything is observed: enough to try a guess or two.
const PRIOR_ACCEPT: f64 = 0.5;
/// A sequence's own estimate of a proposer's acceptance at each position: the proposer's curve
/// over all sequences counts as this many observations, the sequence's own windows add theirs
/// (a chat reply and a code completion accept the same proposer's guesses at very different
/// rates, and a request should not be sized by the last one's).
const SEQ_PRIOR_WEIGHT: f64 = 4.0;
/// Old observations of a sequence fade by this share per window, so a long reply can change.
const SEQ_FORGET: f64 = 0.05;

/// One sequence's record of a proposer: per position, windows that reached it and hits, and
/// the proposer's curve when the sequence started.
#[derive(Clone, Debug)]
struct SeqCurve {
    prior: [f64; MAX_DRAFT],
    trials: [f64; MAX_DRAFT],
    hits: [f64; MAX_DRAFT],
}

impl SeqCurve {
    /// Per position, the estimate, at the first position plus one standard deviation of it:
    /// optimistic while little is known, so that one early miss does not stop a good proposer
    /// from being tried again, and settling on the sequence's own rate as windows accumulate.
    /// A position the sequence's windows have not reached yet is assumed no better than the
    /// one before it.
    fn optimistic(&self) -> [f64; MAX_DRAFT] {
        let mut out = [0.0; MAX_DRAFT];
        for i in 0..MAX_DRAFT {
            let n = SEQ_PRIOR_WEIGHT + self.trials[i];
            let p = (self.prior[i] * SEQ_PRIOR_WEIGHT + self.hits[i]) / n;
            // The bonus goes to the first position only: it decides whether to draft at all
            // (exploration); how far to draft follows the estimates themselves.
            out[i] = if i == 0 {
                (p + (p * (1.0 - p) / (n + 1.0)).sqrt()).min(1.0)
            } else {
                p
            };
            if i > 0 && self.trials[i] < 0.5 {
                out[i] = out[i].min(out[i - 1]);
            }
        }
        out
    }
}

/// Per position, P(guess accepted | the ones before accepted), and how many leading positions
/// have been observed (a window observes positions from the first in order).
type Curve = ([f64; MAX_DRAFT], usize);
/// Drafting must promise this much over serial decoding before it is tried: a window also costs
/// sampling and bookkeeping per row that the forward cost does not include, and a wrong guess
/// about acceptance must not make a request slower than serial.
const DRAFT_MARGIN: f64 = 0.08;
/// Rounds between forced one-draft probes of a proposer that stopped paying (to notice recovery).
pub const PROBE_EVERY: usize = 32;
/// The most a probe's catch-up may cost, as a share of the [`PROBE_EVERY`] rounds' forwards
/// that pay for it: on a GPU, a draft model that fell far behind can take 30-50 ms to catch up
/// while a round takes about 1 ms, so probing it would slow every reply more than drafting
/// could ever win back.
pub const PROBE_SHARE: f64 = 0.25;
/// Rounds a draft model's catch-up (the tokens copies or serial rounds committed since its last
/// use) is charged over when the model is weighed for a round: it is paid once and then serves
/// the rounds after it, but after a long run of copies (an edit that reproduces its source) it
/// costs several serial steps, and a short stretch without copies is cheaper served serially.
pub const CATCH_UP_ROUNDS: usize = 4;

pub struct CostModel {
    /// Shape of the cost curve: seconds per forward of r rows at `scale` 1, index r (0 unused).
    row_secs: Vec<f64>,
    /// How the machine runs now relative to the measured shape.
    scale: f64,
    /// Per proposer: P(guess i accepted | guesses before it accepted), over all sequences.
    accept: HashMap<SourceId, Curve>,
    /// Per sequence and proposer, started from the proposer's curve at the sequence's first
    /// window and then following that sequence only.
    seq_accept: HashMap<(SeqId, SourceId), SeqCurve>,
    /// Acceptance assumed for a proposer before it is observed (default [`PRIOR_ACCEPT`]).
    priors: HashMap<SourceId, f64>,
    /// Per proposer that runs a model: seconds per proposed token over seconds of a one-row
    /// target forward.
    propose_secs: HashMap<SourceId, f64>,
    /// Per proposer that runs a model: seconds per row of its catch-up forwards over seconds of
    /// a one-row target forward.
    catch_up_row: HashMap<SourceId, f64>,
}

impl CostModel {
    /// From measured (rows, seconds) points; rows between them are interpolated linearly.
    pub fn from_points(points: &[(usize, f64)]) -> CostModel {
        let mut pts: Vec<(usize, f64)> = points.iter().copied().filter(|p| p.0 > 0).collect();
        pts.sort_by_key(|p| p.0);
        assert!(!pts.is_empty(), "cost model needs at least one measurement");
        let mut row_secs = vec![0.0; MAX_ROWS + 1];
        for (r, slot) in row_secs.iter_mut().enumerate().skip(1) {
            *slot = interpolate(&pts, r);
        }
        CostModel {
            row_secs,
            scale: 1.0,
            accept: HashMap::new(),
            seq_accept: HashMap::new(),
            priors: HashMap::new(),
            propose_secs: HashMap::new(),
            catch_up_row: HashMap::new(),
        }
    }

    /// The forward costs of `points`, keeping what was learnt and assumed about proposers.
    pub fn recalibrated(&self, points: &[(usize, f64)]) -> CostModel {
        CostModel {
            accept: self.accept.clone(),
            seq_accept: self.seq_accept.clone(),
            priors: self.priors.clone(),
            propose_secs: self.propose_secs.clone(),
            catch_up_row: self.catch_up_row.clone(),
            ..CostModel::from_points(points)
        }
    }

    /// Acceptance to assume for `source` before any of its guesses is observed.
    pub fn set_prior(&mut self, source: SourceId, p: f64) {
        self.priors.insert(source, p.clamp(0.0, 1.0));
    }

    fn prior(&self, source: SourceId) -> f64 {
        self.priors.get(&source).copied().unwrap_or(PRIOR_ACCEPT)
    }

    /// A flat cost (every forward the same price): drafting always pays. For tests.
    pub fn flat() -> CostModel {
        CostModel::from_points(&[(1, 1.0), (MAX_ROWS, 1.0)])
    }

    pub fn forward_secs(&self, rows: usize) -> f64 {
        if rows == 0 {
            return 0.0;
        }
        self.scale
            * if rows <= MAX_ROWS {
                self.row_secs[rows]
            } else {
                self.row_secs[MAX_ROWS] * rows as f64 / MAX_ROWS as f64
            }
    }

    /// Refines the cost of `rows`-row forwards with one observation.
    pub fn observe_forward(&mut self, rows: usize, secs: f64) {
        if !(1..=MAX_ROWS).contains(&rows) || secs.is_nan() || secs <= 0.0 {
            return;
        }
        // In log terms: the whole curve follows the observation quickly (the machine got slower
        // or faster), the observed point's share of the shape slowly. A step slowed by something
        // else on the machine is capped so it cannot poison the estimate.
        let ratio = (secs / self.forward_secs(rows)).min(3.0);
        self.scale *= ratio.powf(4.0 * DECAY);
        self.row_secs[rows] *= ratio.powf(DECAY / 8.0);
    }

    /// A proposer spent `secs` on `tokens` guesses. Kept relative to a one-row forward of the
    /// target at the time: both run on the same cores and memory, so when the machine slows
    /// down or speeds up (another tenant, clocks) they move together, and a guess measured on
    /// a slow minute does not look dear for good (it would never be tried again to correct).
    ///
    /// The estimate falls halfway to a cheaper observation and rises slowly toward a dearer
    /// one (a third of the way, the observation counted at most three times the estimate):
    /// what slows a guess is something else on the machine, never the guess itself, so the
    /// cheap measurements are the true cost, and a guess measured in a slow moment must not
    /// keep a good proposer from being used (it is only measured again when it runs, that is,
    /// on a probe).
    pub fn observe_propose(&mut self, source: SourceId, tokens: usize, secs: f64) {
        if tokens == 0 || secs.is_nan() || secs < 0.0 {
            return;
        }
        let per = secs / tokens as f64 / self.forward_secs(1);
        follow_cheap(self.propose_secs.entry(source).or_insert(per), per);
    }

    /// A proposer's catch-up forward ran `rows` rows in `secs` (kept like
    /// [`observe_propose`](CostModel::observe_propose)).
    pub fn observe_catch_up(&mut self, source: SourceId, rows: usize, secs: f64) {
        if rows == 0 || secs.is_nan() || secs < 0.0 {
            return;
        }
        let per = secs / rows as f64 / self.forward_secs(1);
        follow_cheap(self.catch_up_row.entry(source).or_insert(per), per);
    }

    /// Seconds per guess of `source` (0 until it was observed).
    pub fn propose_secs(&self, source: SourceId) -> f64 {
        self.propose_secs.get(&source).copied().unwrap_or(0.0) * self.forward_secs(1)
    }

    /// What a catch-up of `rows` rows through `source` (a draft model) is expected to cost a
    /// round that uses it, shared by the [`CATCH_UP_ROUNDS`] rounds it is expected to serve: its
    /// measured seconds a catch-up row ([`observe_catch_up`](CostModel::observe_catch_up)), or
    /// until one ran, the target's cost curve scaled to the source's one-row guess. The draft
    /// model's own rows need not be as cheap as the target's: on an AVX2 CPU 8 rows of the
    /// 0.5B cost about 5.8 guesses where the target's curve says 2.2-3.5.
    ///
    /// A catch-up of up to one window's rows (`MAX_DRAFT + 1`: a round of copies) is not
    /// charged: whichever source takes this round, the model pays about that much when it is
    /// next used, so it must not tilt the choice toward copies (short copies are rarely right).
    pub fn catch_up_secs(&self, source: SourceId, rows: usize) -> f64 {
        self.catch_up_whole_secs(source, rows) / CATCH_UP_ROUNDS as f64
    }

    /// The whole of that catch-up's expected seconds, not shared over rounds (a prompt's
    /// prefill, a probe's catch-up); zero up to one window's rows, as there.
    pub fn catch_up_whole_secs(&self, source: SourceId, rows: usize) -> f64 {
        if rows <= MAX_DRAFT + 1 {
            return 0.0;
        }
        match self.catch_up_row.get(&source) {
            Some(per_row) => per_row * rows as f64 * self.forward_secs(1),
            None => self.propose_secs(source) * self.forward_secs(rows) / self.forward_secs(1),
        }
    }

    /// Rows of `source`'s catch-up that cost about what a target forward of `rows` rows costs
    /// (at least `rows`; every row when nothing is known of its cost): how much of a long
    /// prompt a draft model runs in one step.
    pub fn catch_up_rows_like(&self, source: SourceId, rows: usize) -> usize {
        // A row's cost measured far past any step's rows, where a catch-up's cost is linear.
        const MANY: usize = 1 << 16;
        let per_row = self.catch_up_whole_secs(source, MANY) / MANY as f64;
        if per_row > 0.0 {
            ((self.forward_secs(rows) / per_row) as usize).max(rows)
        } else {
            usize::MAX
        }
    }

    /// A window of `drafted` guesses from `source` (for sequence `seq`) had its first
    /// `accepted` accepted.
    pub fn observe_accept(
        &mut self,
        source: SourceId,
        seq: Option<SeqId>,
        drafted: usize,
        accepted: usize,
    ) {
        if let Some(id) = seq {
            let start = self.seq_start(source);
            let c = self.seq_accept.entry((id, source)).or_insert(start);
            for i in 0..MAX_DRAFT {
                c.trials[i] *= 1.0 - SEQ_FORGET;
                c.hits[i] *= 1.0 - SEQ_FORGET;
            }
            for i in 0..drafted.min(MAX_DRAFT).min(accepted + 1) {
                c.trials[i] += 1.0;
                c.hits[i] += if i < accepted { 1.0 } else { 0.0 };
            }
        }
        let prior = self.prior(source);
        let c = self.accept.entry(source).or_insert(([prior; MAX_DRAFT], 0));
        learn(c, DECAY, drafted, accepted, prior);
    }

    /// A new sequence's record of `source`: the curve over all sequences where it beats the
    /// assumed prior, else halfway between the two. A proposer whose recent requests went
    /// badly (a run of chat after code) is still tried by the next request, which then follows
    /// its own windows; one whose requests went well starts the next one at the windows they
    /// earned. Starting a good proposer halfway down to the prior cost every request its
    /// first rounds: a code completion whose guesses land 0.9 of the time began with the
    /// windows of 0.8, about one guess shorter, until its own record caught up.
    fn seq_start(&self, source: SourceId) -> SeqCurve {
        let all = self.acceptance(source, None);
        let prior = self.prior(source);
        SeqCurve {
            prior: std::array::from_fn(|i| (0.5 * (prior + all[i])).max(all[i])),
            trials: [0.0; MAX_DRAFT],
            hits: [0.0; MAX_DRAFT],
        }
    }

    /// Drops what was learnt about one sequence (it finished).
    pub fn forget(&mut self, seq: SeqId) {
        self.seq_accept.retain(|(id, _), _| *id != seq);
    }

    /// Per position, the decaying acceptance over all sequences; past the last position ever
    /// observed, that position's estimate (a source whose guesses keep landing is assumed to
    /// keep landing one further, so that windows can grow and learn; the prior where nothing
    /// was seen). For a sequence, its own optimistic estimate ([`SeqCurve`], started by
    /// [`seq_start`](CostModel::seq_start)).
    pub fn acceptance(&self, source: SourceId, seq: Option<SeqId>) -> [f64; MAX_DRAFT] {
        if let Some(id) = seq {
            return match self.seq_accept.get(&(id, source)) {
                Some(c) => c.optimistic(),
                None => self.seq_start(source).optimistic(),
            };
        }
        match self.accept.get(&source) {
            None | Some((_, 0)) => [self.prior(source); MAX_DRAFT],
            Some(&(mut p, seen)) => {
                for i in seen..MAX_DRAFT {
                    p[i] = p[seen - 1];
                }
                p
            }
        }
    }

    /// Whether a proposer costing `per_guess_secs` a guess could beat serial decoding even if
    /// every guess were accepted. When it cannot, it is not worth even a probe.
    pub fn can_ever_pay(&self, other_rows: usize, per_guess_secs: f64) -> bool {
        let serial = 1.0 / self.forward_secs(other_rows + 1);
        (1..=MAX_DRAFT).any(|k| {
            let r = (k + 1) as f64
                / (self.forward_secs(other_rows + 1 + k) + per_guess_secs * k as f64);
            r > serial * (1.0 + DRAFT_MARGIN)
        })
    }

    /// Whether running `rows` rows through `source` (a draft model's prefill of a prompt)
    /// could be paid back within `tokens` reply tokens: what drafting is expected to save a
    /// token against serial decoding (the best window, its guesses accepted at the source's
    /// rate over all sequences so far), times the tokens, against the rows' cost (as for a
    /// catch-up, not shared over rounds). A long prompt with a short reply is served faster
    /// without the draft model.
    pub fn prefill_can_pay(&self, source: SourceId, rows: usize, tokens: usize) -> bool {
        let per = self.propose_secs(source);
        let best = (1..=MAX_DRAFT)
            .map(|k| {
                (self.forward_secs(1 + k) + per * k as f64) / self.expected_tokens(source, None, k)
            })
            .fold(f64::INFINITY, f64::min);
        let saving = (self.forward_secs(1) - best).max(0.0) * tokens as f64;
        self.catch_up_whole_secs(source, rows) <= saving
    }

    /// Expected tokens committed by a window with `k` guesses from `source`: the target's own
    /// token plus each guess weighted by the chance that it and all before it are accepted.
    pub fn expected_tokens(&self, source: SourceId, seq: Option<SeqId>, k: usize) -> f64 {
        let p = self.acceptance(source, seq);
        let mut total = 1.0;
        let mut chain = 1.0;
        for pi in p.iter().take(k.min(MAX_DRAFT)) {
            chain *= pi;
            total += chain;
        }
        total
    }

    /// The number of guesses (at most `available`) that maximizes committed tokens per second
    /// for one sequence (`seq`) whose window shares a step with `other_rows` rows of other
    /// work. `per_guess_secs` is what producing one guess costs (zero for copies).
    pub fn best_window(
        &self,
        source: SourceId,
        seq: Option<SeqId>,
        available: usize,
        other_rows: usize,
        per_guess_secs: f64,
    ) -> usize {
        let rate = |k: usize| {
            self.expected_tokens(source, seq, k)
                / (self.forward_secs(other_rows + 1 + k) + per_guess_secs * k as f64)
        };
        let serial = rate(0);
        let mut best = 0;
        let mut best_rate = serial;
        for k in 1..=available.min(MAX_DRAFT) {
            let r = rate(k);
            if r > best_rate && r > serial * (1.0 + DRAFT_MARGIN) {
                best = k;
                best_rate = r;
            }
        }
        best
    }
}

/// One window's observation into `c`: positions up to the first miss, each moved `decay` of
/// the way to hit or miss; a position's first observation starts from the one before it (or
/// `prior`).
fn learn(c: &mut Curve, decay: f64, drafted: usize, accepted: usize, prior: f64) {
    let (p, seen) = c;
    for i in 0..drafted.min(MAX_DRAFT) {
        if i > accepted {
            break;
        }
        if i >= *seen {
            p[i] = if i == 0 { prior } else { p[i - 1] };
            *seen = i + 1;
        }
        let hit = if i < accepted { 1.0 } else { 0.0 };
        p[i] += decay * (hit - p[i]);
    }
}

fn interpolate(pts: &[(usize, f64)], r: usize) -> f64 {
    if r <= pts[0].0 {
        return pts[0].1;
    }
    for w in pts.windows(2) {
        let ((r0, s0), (r1, s1)) = (w[0], w[1]);
        if r <= r1 {
            return s0 + (s1 - s0) * (r - r0) as f64 / (r1 - r0) as f64;
        }
    }
    let (rl, sl) = pts[pts.len() - 1];
    if pts.len() >= 2 {
        let (rp, sp) = pts[pts.len() - 2];
        let slope = ((sl - sp) / (rl - rp) as f64).max(0.0);
        sl + slope * (r - rl) as f64
    } else {
        sl * r as f64 / rl as f64
    }
}

/// Moves the estimate `e` toward an observation `obs` of a proposer's cost: halfway when cheaper,
/// slowly when dearer (the observation counted at most three times the estimate). What slows a
/// guess is something else on the machine, never the guess itself, so the cheap measurements
/// are the true cost.
fn follow_cheap(e: &mut f64, obs: f64) {
    if obs < *e {
        *e -= 0.5 * (*e - obs);
    } else {
        *e += DECAY * 4.0 * (obs.min(3.0 * *e) - *e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefill_is_run_only_where_the_reply_could_pay_it_back() {
        let mut cost = CostModel::from_points(&[(1, 1.0), (4, 1.1), (8, 1.5), (16, 2.8)]);
        cost.observe_propose(SourceId::DraftModel, 4, 4.0 * 0.25);
        cost.observe_catch_up(SourceId::DraftModel, 32, 32.0 * 0.08);
        // 5000 rows cost 400 steps; 8 tokens save at most a few.
        assert!(!cost.prefill_can_pay(SourceId::DraftModel, 5000, 8));
        assert!(cost.prefill_can_pay(SourceId::DraftModel, 5000, 4000));
        // Guesses accepted at half the time (the prior) save about 0.15 of a step a token,
        // not the 0.4 that every guess accepted would: 2000 tokens do not pay 400 steps.
        assert!(!cost.prefill_can_pay(SourceId::DraftModel, 5000, 2000));
        let mut good = CostModel::from_points(&[(1, 1.0), (4, 1.1), (8, 1.5), (16, 2.8)]);
        good.observe_propose(SourceId::DraftModel, 4, 4.0 * 0.25);
        good.observe_catch_up(SourceId::DraftModel, 32, 32.0 * 0.08);
        good.set_prior(SourceId::DraftModel, 0.9);
        assert!(good.prefill_can_pay(SourceId::DraftModel, 5000, 2000));
        // A short prompt pays within a short reply.
        assert!(cost.prefill_can_pay(SourceId::DraftModel, 100, 64));
        assert!(!cost.prefill_can_pay(SourceId::DraftModel, 100, 4));
        // Up to a window's rows are never charged.
        assert!(cost.prefill_can_pay(SourceId::DraftModel, MAX_DRAFT, 1));
        // A draft as dear as the target never saves anything.
        let mut dear = CostModel::from_points(&[(1, 1.0), (16, 1.0)]);
        dear.observe_propose(SourceId::DraftModel, 1, 1.0);
        assert!(!dear.prefill_can_pay(SourceId::DraftModel, 100, 1000));
    }

    #[test]
    fn a_catch_up_costs_the_draft_models_rows_shared_over_its_rounds() {
        // The CPU's shape: up to 4 rows at one row's cost, then about linear.
        let mut cost =
            CostModel::from_points(&[(1, 1.0), (4, 1.0), (8, 1.5), (16, 3.0), (32, 6.0)]);
        cost.observe_propose(SourceId::DraftModel, 1, 0.25);
        // Up to one window behind: paid whichever source takes the round, so not charged.
        assert_eq!(cost.catch_up_secs(SourceId::DraftModel, 0), 0.0);
        assert_eq!(cost.catch_up_secs(SourceId::DraftModel, MAX_DRAFT + 1), 0.0);
        // Before any catch-up ran: the target's curve scaled to a guess, over its rounds.
        let per = cost.propose_secs(SourceId::DraftModel);
        for rows in [MAX_DRAFT + 2, 32] {
            let got = cost.catch_up_secs(SourceId::DraftModel, rows);
            let want =
                per * cost.forward_secs(rows) / cost.forward_secs(1) / CATCH_UP_ROUNDS as f64;
            assert!((got - want).abs() < 1e-12, "{rows}: {got} {want}");
        }
        // 100 rows behind (a long run of copies): a catch-up of several target steps.
        let long = cost.catch_up_secs(SourceId::DraftModel, 100);
        assert!(
            long > 4.0 * cost.forward_secs(1) / CATCH_UP_ROUNDS as f64,
            "{long}"
        );
        assert!(long > 3.0 * cost.catch_up_secs(SourceId::DraftModel, 32));
        // A source never measured costs nothing to catch up.
        assert_eq!(cost.catch_up_secs(SourceId::Other("copies"), 100), 0.0);
        // Measured: 20 rows in 4 s (each row nearly a guess, as on an AVX2 CPU), charged per
        // row whatever the target's curve says.
        cost.observe_catch_up(SourceId::DraftModel, 20, 4.0);
        let twenty = cost.catch_up_secs(SourceId::DraftModel, 20);
        assert!((twenty - 1.0).abs() < 1e-12, "{twenty}");
        let forty = cost.catch_up_secs(SourceId::DraftModel, 40);
        assert!((forty - 2.0).abs() < 1e-12, "{forty}");
        // A slower measurement moves the estimate only a little; a cheaper one halfway.
        cost.observe_catch_up(SourceId::DraftModel, 20, 40.0);
        let after_slow = cost.catch_up_secs(SourceId::DraftModel, 20);
        assert!(
            after_slow > twenty && after_slow < 2.0 * twenty,
            "{after_slow}"
        );
        cost.observe_catch_up(SourceId::DraftModel, 20, 0.0);
        assert!(cost.catch_up_secs(SourceId::DraftModel, 20) < 0.6 * after_slow);
    }

    #[test]
    fn drafts_pay_only_when_rows_are_cheap_and_guesses_good() {
        // Rows nearly free: draft as much as is available.
        let mut cheap = CostModel::from_points(&[(1, 1.0), (16, 1.2)]);
        for _ in 0..200 {
            cheap.observe_accept(SourceId::Other("copies"), None, 8, 8);
        }
        assert_eq!(
            cheap.best_window(SourceId::Other("copies"), None, 8, 0, 0.0),
            8
        );
        // Guesses never accepted: propose none.
        for _ in 0..400 {
            cheap.observe_accept(SourceId::Other("copies"), None, 4, 0);
        }
        assert_eq!(
            cheap.best_window(SourceId::Other("copies"), None, 8, 0, 0.0),
            0
        );
        // Rows cost as much as serial steps: no gain possible.
        let linear = CostModel::from_points(&[(1, 1.0), (16, 16.0)]);
        assert_eq!(
            linear.best_window(SourceId::Other("copies"), None, 8, 0, 0.0),
            0
        );
        // A proposer that costs 70% of a target step per guess does not pay at 60% acceptance
        // (1.6 tokens for 1.73 steps); at 5% it does.
        let flatish = CostModel::from_points(&[(1, 1.0), (16, 1.5)]);
        assert_eq!(
            flatish.best_window(SourceId::DraftModel, None, 8, 0, 0.7),
            0
        );
        assert!(flatish.best_window(SourceId::DraftModel, None, 8, 0, 0.05) > 0);
    }

    #[test]
    fn each_sequence_follows_its_own_acceptance() {
        let mut m = CostModel::from_points(&[(1, 1.0), (8, 1.3)]);
        m.set_prior(SourceId::Other("d"), 0.7);
        assert_eq!(m.acceptance(SourceId::Other("d"), None), [0.7; MAX_DRAFT]);
        assert!(
            m.acceptance(SourceId::Other("d"), Some(1))[0] > 0.7,
            "optimistic at first"
        );
        // Sequence 1 accepts everything, sequence 2 nothing: each is sized by its own record,
        // and a new sequence starts from what all of them taught.
        for _ in 0..30 {
            m.observe_accept(SourceId::Other("d"), Some(1), 4, 4);
            m.observe_accept(SourceId::Other("d"), Some(2), 4, 0);
        }
        assert!(m.best_window(SourceId::Other("d"), Some(1), 8, 0, 0.1) >= 4);
        assert_eq!(m.best_window(SourceId::Other("d"), Some(2), 8, 0, 0.1), 0);
        // A new sequence starts from what all of them taught where it beats the prior, else
        // halfway between the two.
        let all = m.acceptance(SourceId::Other("d"), None);
        let fresh = m.acceptance(SourceId::Other("d"), Some(3));
        for i in 0..MAX_DRAFT {
            let start = (0.5 * (0.7 + all[i])).max(all[i]);
            let at = |p: f64| if i == 0 { p } else { p.min(fresh[i - 1]) };
            assert!(fresh[i] >= at(start) - 1e-12, "{i}: {fresh:?} {all:?}");
            assert!(fresh[i] < start + 0.25, "{i}: {fresh:?} {all:?}");
        }
        // After a run of good windows a new sequence starts at their curve, not below it.
        let mut good = CostModel::from_points(&[(1, 1.0), (8, 1.3)]);
        good.set_prior(SourceId::Other("d"), 0.7);
        for _ in 0..60 {
            good.observe_accept(SourceId::Other("d"), Some(5), 6, 6);
        }
        let all = good.acceptance(SourceId::Other("d"), None);
        assert!(all[5] > 0.9, "{all:?}");
        let fresh = good.acceptance(SourceId::Other("d"), Some(6));
        // (each position capped by the one before it, as for any position not tried yet)
        for i in 0..6 {
            let floor = all[..=i].iter().copied().fold(1.0, f64::min);
            assert!(fresh[i] >= floor - 1e-12, "{i}: {fresh:?} {all:?}");
        }
        // After a run of misses it starts halfway back to the prior, so it is tried again.
        for _ in 0..200 {
            good.observe_accept(SourceId::Other("d"), Some(5), 6, 0);
        }
        let all = good.acceptance(SourceId::Other("d"), None)[0];
        let fresh = good.acceptance(SourceId::Other("d"), Some(8))[0];
        assert!(
            all < 0.2 && fresh > 0.5 * (0.7 + all) - 1e-12,
            "{fresh} {all}"
        );
        // One early miss of a good proposer leaves it worth another try.
        let mut g = CostModel::from_points(&[(1, 1.0), (8, 1.3)]);
        g.set_prior(SourceId::Other("d"), 0.85);
        g.observe_accept(SourceId::Other("d"), Some(7), 4, 0);
        assert!(g.best_window(SourceId::Other("d"), Some(7), 8, 0, 0.3) > 0);
        m.forget(1);
        assert_eq!(
            m.acceptance(SourceId::Other("d"), Some(1)),
            m.acceptance(SourceId::Other("d"), Some(3))
        );
        // Learnt curves and priors survive a new calibration.
        let r = m.recalibrated(&[(1, 2.0)]);
        assert_eq!(
            r.acceptance(SourceId::Other("d"), Some(2)),
            m.acceptance(SourceId::Other("d"), Some(2))
        );
        assert_eq!(r.forward_secs(1), 2.0);
    }

    #[test]
    fn a_slow_guess_raises_the_cost_slowly_and_a_fast_one_lowers_it_fast() {
        let mut c = CostModel::from_points(&[(1, 1.0), (8, 2.0)]);
        c.observe_propose(SourceId::Other("m"), 1, 0.25);
        assert_eq!(c.propose_secs(SourceId::Other("m")), 0.25);
        // A stall of 40 forwards: capped at three times the estimate, a third of the way.
        c.observe_propose(SourceId::Other("m"), 1, 10.0);
        let after = c.propose_secs(SourceId::Other("m"));
        assert!(after > 0.25 && after < 0.5, "{after}");
        // Back to normal: halfway down at once.
        c.observe_propose(SourceId::Other("m"), 1, 0.25);
        assert!((c.propose_secs(SourceId::Other("m")) - (after + 0.25) / 2.0).abs() < 1e-12);
    }

    #[test]
    fn observations_rescale_the_whole_curve() {
        // A flat prior meets a machine where every forward takes a microsecond: the curve must
        // come down everywhere, not only at the observed row count.
        let mut m = CostModel::flat();
        for _ in 0..400 {
            m.observe_forward(1, 1e-6);
        }
        assert!(m.forward_secs(1) < 1e-5);
        assert!(m.forward_secs(2) < 2e-6, "{}", m.forward_secs(2));
    }

    #[test]
    fn acceptance_is_conditional_per_position() {
        let mut m = CostModel::flat();
        for _ in 0..500 {
            m.observe_accept(SourceId::Other("x"), None, 4, 1);
        }
        let p = m.acceptance(SourceId::Other("x"), None);
        assert!(p[0] > 0.95 && p[1] < 0.05);
        // No observation past the first miss: the last observed position's estimate.
        assert_eq!(p[2], p[1]);
        assert_eq!(p[MAX_DRAFT - 1], p[1]);
    }

    #[test]
    fn windows_grow_past_positions_never_drafted() {
        // Guesses that always land, from a source only ever drafted 3 at a time: the next
        // position is assumed to land too, so the window can grow (the flat prior would stop
        // it there), and a position's first observation starts from that estimate.
        let mut m = CostModel::from_points(&[(1, 1.0), (4, 1.45), (8, 2.1), (16, 4.2)]);
        for _ in 0..100 {
            m.observe_accept(SourceId::Other("c"), None, 3, 3);
        }
        let p = m.acceptance(SourceId::Other("c"), None);
        assert!(p[2] > 0.99 && p[3] == p[2] && p[8] == p[2]);
        assert!(m.best_window(SourceId::Other("c"), None, 8, 0, 0.0) > 3);
        m.observe_accept(SourceId::Other("c"), None, 4, 3);
        let q = m.acceptance(SourceId::Other("c"), None);
        assert!((q[3] - q[2] * (1.0 - DECAY)).abs() < 1e-12, "{}", q[3]);
        assert_eq!(
            m.acceptance(SourceId::Other("never"), None),
            [PRIOR_ACCEPT; MAX_DRAFT]
        );
    }
}
