//! `tensorfold models`: the built-in catalogue and what of it is cached.

use anyhow::Result;

use crate::load::human_bytes;
use crate::GlobalArgs;

pub fn run(global: &GlobalArgs) -> Result<()> {
    let cache = global.cache_dir();
    let rows: Vec<[String; 5]> = tf_fetch::catalogue()
        .iter()
        .map(|entry| {
            // Presence only: verifying a checksum here would hash a gigabyte per listing.
            let cached = tf_fetch::entry_path(entry, &cache).is_file();
            [
                entry.name.to_string(),
                human_bytes(entry.size_bytes),
                if cached { "yes" } else { "no" }.to_string(),
                entry.draft.unwrap_or("-").to_string(),
                entry.description.to_string(),
            ]
        })
        .collect();
    let header = ["NAME", "SIZE", "CACHED", "DRAFT", "DESCRIPTION"];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 5]| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s += cell;
            } else {
                s += &format!("{cell:<w$}  ", w = widths[i]);
            }
        }
        s
    };
    println!("{}", line(header));
    for row in &rows {
        println!("{}", line(row.each_ref().map(String::as_str)));
    }
    println!(
        "\ncache: {}  (default model: {})",
        tf_fetch::models_dir(&cache).display(),
        tf_fetch::default_model().name
    );
    Ok(())
}
