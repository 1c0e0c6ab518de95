//! A model check's tally: passes of total, the first failure's detail (the model checks here,
//! and the CLI's reply checks).

/// Tally of one check: passes of total, with the first failure's detail.
pub struct Tally {
    pub name: &'static str,
    pub pass: usize,
    pub total: usize,
    pub note: String,
}

impl Tally {
    pub fn new(name: &'static str) -> Tally {
        Tally {
            name,
            pass: 0,
            total: 0,
            note: String::new(),
        }
    }
    /// A note shown when every check passed (a failure's detail takes the column otherwise).
    pub fn note_if_empty(&mut self, note: String) {
        if self.note.is_empty() {
            self.note = note;
        }
    }

    pub fn check(&mut self, ok: bool, detail: impl FnOnce() -> String) {
        self.total += 1;
        if ok {
            self.pass += 1;
        } else if self.note.is_empty() {
            self.note = detail();
        }
    }
}

/// Prints `tallies` as a table; the number of checks that failed.
pub fn print(tallies: &[Tally]) -> usize {
    println!("| check | result | note |\n|---|---|---|");
    let mut failed = 0;
    for t in tallies {
        let ok = t.pass == t.total;
        failed += usize::from(!ok);
        println!("| {} | {} of {} | {} |", t.name, t.pass, t.total, t.note);
    }
    failed
}
