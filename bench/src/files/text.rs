//! The text data set of the files section: files of text lines (a corpus of
//! sentences, ~60–200 bytes a line), read by `list_files` → `interleave(text_lines)`.
//!
//! Deterministic from the seed, so every run reads the same bytes. The words come
//! from a small vocabulary with Zipf-like frequencies, like real text, but nothing
//! reads their meaning: the pipeline moves lines, which is what it measures.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const WORDS: [&str; 32] = [
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be",
    "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have",
    "an", "had", "they", "you", "were",
];

/// What [`write`] wrote.
pub struct TextSummary {
    pub files: usize,
    pub lines: u64,
    pub bytes: u64,
}

/// Writes `files` files of `lines_per_file` lines each into `dir`
/// (`part-00000.txt`, …).
pub fn write(
    dir: &Path,
    files: usize,
    lines_per_file: usize,
    seed: u64,
) -> anyhow::Result<TextSummary> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut summary = TextSummary { files, lines: 0, bytes: 0 };
    for f in 0..files {
        let path = dir.join(format!("part-{f:05}.txt"));
        let mut rng =
            ChaCha8Rng::seed_from_u64(seed ^ (f as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
        );
        for _ in 0..lines_per_file {
            let mut line = String::new();
            for i in 0..rng.gen_range(12..40) {
                // Zipf-like: low indices far more often.
                let w = WORDS[(rng.gen::<f64>().powi(3) * WORDS.len() as f64) as usize];
                if i > 0 {
                    line.push(' ');
                }
                line.push_str(w);
            }
            line.push('\n');
            out.write_all(line.as_bytes())?;
            summary.bytes += line.len() as u64;
            summary.lines += 1;
        }
        out.flush()?;
    }
    Ok(summary)
}
