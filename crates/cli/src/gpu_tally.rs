//! A GPU check's tally (passes of total, the first failure's detail), shared by the model
//! checks (`gpu_check_model.rs`) and the reply checks (`gpu_check_replies.rs`).

/// Tally of one check: passes of total, with the first failure's detail.
pub(crate) struct Tally {
    pub(crate) name: &'static str,
    pub(crate) pass: usize,
    pub(crate) total: usize,
    pub(crate) note: String,
}

impl Tally {
    pub(crate) fn new(name: &'static str) -> Tally {
        Tally {
            name,
            pass: 0,
            total: 0,
            note: String::new(),
        }
    }
    /// A note shown when every check passed (a failure's detail takes the column otherwise).
    pub(crate) fn note_if_empty(&mut self, note: String) {
        if self.note.is_empty() {
            self.note = note;
        }
    }

    pub(crate) fn check(&mut self, ok: bool, detail: impl FnOnce() -> String) {
        self.total += 1;
        if ok {
            self.pass += 1;
        } else if self.note.is_empty() {
            self.note = detail();
        }
    }
}
