//! What the kernels read about a call's rows, laid out on the host: positions, the cache index
//! each row writes, and per row its block table and tree remap (see `kernels/attention.cu`).

use std::collections::HashMap;

use tf_engine::runner::Row;
use tf_engine::EngineError;
use tf_kernels::kv::BLOCK_SIZE;

#[derive(Debug, Default, PartialEq, Eq)]
pub struct RowLayout {
    pub pos: Vec<i32>,
    /// Cache index (block id * BLOCK_SIZE + offset) each row's key and value go to.
    pub slot: Vec<i32>,
    /// Per row: offset of its table in `tables`, key count, remap base (-1: none), offset of its
    /// remap slots in `remaps`.
    pub meta: Vec<i32>,
    /// Every distinct block table once.
    pub tables: Vec<i32>,
    pub remaps: Vec<i32>,
    /// Rows whose logits are wanted.
    pub want: Vec<i32>,
    /// The most keys any row reads.
    pub max_keys: usize,
}

fn beyond(b: usize, blocks: usize) -> EngineError {
    EngineError::InvalidRequest(format!("KV block {b} beyond the cache's {blocks} blocks"))
}

/// Cache index of `slot` in a sequence with `table`, in a cache of `blocks` blocks.
pub fn cache_index(table: &[u32], slot: usize, blocks: usize) -> Result<i32, EngineError> {
    let b = *table
        .get(slot / BLOCK_SIZE)
        .ok_or_else(|| EngineError::InvalidRequest(format!("slot {slot} beyond its table")))?
        as usize;
    if b >= blocks {
        return Err(beyond(b, blocks));
    }
    Ok((b * BLOCK_SIZE + slot % BLOCK_SIZE) as i32)
}

/// Lays out `rows` for a cache of `blocks` blocks; every block id and remap is checked.
pub fn layout(rows: &[Row], blocks: usize) -> Result<RowLayout, EngineError> {
    let mut h = RowLayout {
        pos: Vec::with_capacity(rows.len()),
        slot: Vec::with_capacity(rows.len()),
        meta: Vec::with_capacity(4 * rows.len()),
        ..RowLayout::default()
    };
    let mut table_at: HashMap<(usize, usize), i32> = HashMap::new();
    for (r, row) in rows.iter().enumerate() {
        h.pos.push(row.pos as i32);
        h.slot.push(cache_index(row.table, row.slot(), blocks)?);
        let key = (row.table.as_ptr() as usize, row.table.len());
        let toff = match table_at.get(&key) {
            Some(&o) => o,
            None => {
                let o = h.tables.len() as i32;
                for &b in row.table {
                    // A freed entry (behind every layer's window) is never read: any id does.
                    if b == tf_engine::blocks::FREED {
                        h.tables.push(0);
                        continue;
                    }
                    if b as usize >= blocks {
                        return Err(beyond(b as usize, blocks));
                    }
                    h.tables.push(b as i32);
                }
                table_at.insert(key, o);
                o
            }
        };
        let keys = row.pos + 1;
        if keys.div_ceil(BLOCK_SIZE) > row.table.len() {
            return Err(EngineError::InvalidRequest(format!(
                "position {} beyond its block table",
                row.pos
            )));
        }
        let (base, roff) = match row.tree {
            Some(t) => {
                let cap = row.table.len() * BLOCK_SIZE;
                if t.remap.base > keys
                    || t.remap.slots.len() < keys - t.remap.base
                    || t.remap.slots.iter().any(|&s| s >= cap)
                {
                    return Err(EngineError::InvalidRequest(
                        "tree row remap does not cover its keys".into(),
                    ));
                }
                let o = h.remaps.len() as i32;
                h.remaps.extend(t.remap.slots.iter().map(|&s| s as i32));
                (t.remap.base as i32, o)
            }
            None => (-1, 0),
        };
        h.meta.extend([toff, keys as i32, base, roff]);
        h.max_keys = h.max_keys.max(keys);
        if row.logits {
            h.want.push(r as i32);
        }
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_engine::runner::TreeRow;
    use tf_kernels::attention::KeyRemap;

    fn row(table: &[u32], pos: usize, logits: bool) -> Row<'_> {
        Row {
            token: 7,
            pos,
            seq: 0,
            keep: true,
            table,
            logits,
            tree: None,
        }
    }

    #[test]
    fn tables_once_each_and_slots_through_them() {
        let a = [4u32, 9];
        let b = [2u32, 5, 6];
        let rows = [row(&a, 16, false), row(&b, 40, true), row(&a, 17, true)];
        let h = layout(&rows, 10).unwrap();
        assert_eq!(h.tables, vec![4, 9, 2, 5, 6]);
        assert_eq!(h.pos, vec![16, 40, 17]);
        // Position 16 is offset 0 of the table's second block (9); 40 is offset 8 of block 6.
        assert_eq!(h.slot, vec![9 * 16, 6 * 16 + 8, 9 * 16 + 1]);
        assert_eq!(h.meta, vec![0, 17, -1, 0, 2, 41, -1, 0, 0, 18, -1, 0]);
        assert_eq!(h.want, vec![1, 2]);
        assert_eq!(h.max_keys, 41);
    }

    #[test]
    fn tree_rows_carry_their_remap() {
        let t = [0u32, 1];
        let slots = [3usize, 20, 21];
        let tree = TreeRow {
            slot: 21,
            remap: KeyRemap {
                base: 3,
                slots: &slots,
            },
        };
        let rows = [
            row(&t, 2, true),
            Row {
                tree: Some(tree),
                ..row(&t, 5, true)
            },
        ];
        let h = layout(&rows, 2).unwrap();
        assert_eq!(h.slot, vec![2, 16 + 5]);
        assert_eq!(h.meta[4..], [0, 6, 3, 0]);
        assert_eq!(h.remaps, vec![3, 20, 21]);
    }

    #[test]
    fn bad_rows_are_refused() {
        let t = [0u32, 12];
        assert!(layout(&[row(&t, 20, true)], 10).is_err(), "block 12 of 10");
        let short = [0u32];
        assert!(
            layout(&[row(&short, 16, true)], 10).is_err(),
            "past the table"
        );
        let slots = [1usize];
        let tree = TreeRow {
            slot: 3,
            remap: KeyRemap {
                base: 2,
                slots: &slots,
            },
        };
        let t2 = [0u32];
        let r = Row {
            tree: Some(tree),
            ..row(&t2, 5, true)
        };
        assert!(layout(&[r], 10).is_err(), "remap shorter than the keys");
    }
}
