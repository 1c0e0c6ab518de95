//! `gpu-check` of `argmax_rows`, the greedy token taken on the device: each row's id against
//! `tf_engine::greedy_token` of the same floats, over rows built to hit its rules (ties to the
//! lowest id, NaN as -inf, -0.0 equal to +0.0, rows with nothing above -inf, infinite maxima),
//! at widths that take the four-float and the one-float loads, from several first rows.

use crate::Gpu;
use crate::Result;
use tf_engine::greedy_token;

use super::ops::{activations, time, Row};

/// Rows of one test buffer (a call takes at most `LOGIT_ROWS` = 64 rows).
const ROWS: usize = 64;

/// `ROWS` rows of `n` values: random rows (with NaN, -inf and ties sprinkled) and edge rows.
fn logit_rows(n: usize, seed: u64) -> Vec<f32> {
    // One long row of activation-like values cut into rows (any width).
    let mut x = activations(1, ROWS * n, seed);
    for (r, row) in x.chunks_exact_mut(n).enumerate() {
        match r % 8 {
            // The maximum at several places, the first one late.
            1 => {
                for i in [n - 1, n / 2, n / 3 + 1] {
                    row[i] = 1e4;
                }
            }
            // Nothing above -inf: NaN and -inf only.
            2 => {
                for (i, v) in row.iter_mut().enumerate() {
                    *v = if i % 3 == 0 {
                        f32::NAN
                    } else {
                        f32::NEG_INFINITY
                    };
                }
            }
            // All NaN.
            3 => row.fill(f32::NAN),
            // Two infinite maxima after a NaN.
            4 => {
                row[0] = f32::NAN;
                row[n / 2] = f32::INFINITY;
                row[n - 1] = f32::INFINITY;
            }
            // -0.0 before +0.0 as the maximum of negative values.
            5 => {
                for v in row.iter_mut() {
                    *v = -v.abs() - 1.0;
                }
                row[n - 1] = 0.0;
                row[n / 2] = -0.0;
            }
            // Coarse values: many ties at the maximum.
            6 => {
                for v in row.iter_mut() {
                    *v = (*v * 0.5).round();
                }
            }
            _ => {
                for i in (r..n).step_by(97) {
                    row[i] = f32::NAN;
                }
            }
        }
    }
    x
}

pub fn run(gpu: &Gpu, row_counts: &[usize], seed: u64, table: &mut Vec<Row>) -> Result<()> {
    for n in [151_936, 151_667, 7] {
        let x = logit_rows(n, seed ^ n as u64);
        let want: Vec<i32> = x.chunks_exact(n).map(|r| greedy_token(r) as i32).collect();
        let dx = gpu.upload(&x)?;
        for &rows in row_counts.iter().filter(|&&r| r <= ROWS) {
            for first in [0, ROWS - rows] {
                let mut out = gpu.zeros::<i32>(rows)?;
                let mut launch = || gpu.argmax_rows(&dx, n, first, rows, &mut out);
                launch()?;
                let micros = time(gpu, &mut launch)?;
                let got = gpu.download(&out)?;
                let equal = got
                    .iter()
                    .zip(&want[first..first + rows])
                    .filter(|(g, w)| g == w)
                    .count();
                table.push(Row {
                    op: "argmax_rows".into(),
                    ty: format!("n={n} from row {first}"),
                    rows,
                    equal,
                    total: rows,
                    max_diff: 0.0,
                    micros,
                });
            }
        }
    }
    Ok(())
}
