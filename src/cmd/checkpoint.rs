//! `sluice read --checkpoint FILE`: a reader's position kept in a file, so a
//! reader restarted after a crash continues with exactly what it had not
//! consumed (docs/exactly-once.md).
//!
//! The protocol a supervisor (or the chaos checker) relies on: every
//! `--checkpoint-every` elements the reader flushes the lines it printed, prints
//! `# checkpoint G` (G: the position's generation) and then replaces FILE
//! atomically (write a temporary file, fsync it, rename it over FILE, fsync the
//! directory). So the position in FILE with generation G covers exactly the
//! lines printed before the marker `# checkpoint G`; a crash between the marker
//! and the rename leaves generation G-1 in FILE, whose marker came earlier.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use sluice_client::ElementStream;
use sluice_positions::limits::MAX_POSITION_BYTES;
use sluice_positions::Position;

/// Reads the position saved in `path`; `None` when there is no such file yet.
pub fn load(path: &Path) -> anyhow::Result<Option<Position>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("--checkpoint {}", path.display())),
    };
    // Bounded before it allocates: one byte more than a position may have.
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(file, MAX_POSITION_BYTES as u64 + 1),
        &mut bytes,
    )
    .with_context(|| format!("--checkpoint {}", path.display()))?;
    let position = Position::decode(&bytes).with_context(|| {
        format!(
            "--checkpoint {}: not a readable position; move it away to start the job's \
             epoch from where the dispatcher stands, or give another file",
            path.display()
        )
    })?;
    Ok(Some(position))
}

/// Writes a reader's position to its file every `every` elements.
pub struct Checkpoint {
    path: PathBuf,
    every: u64,
}

impl Checkpoint {
    pub fn new(path: PathBuf, every: u64) -> anyhow::Result<Self> {
        if every == 0 {
            anyhow::bail!("--checkpoint-every must be at least 1");
        }
        Ok(Checkpoint { path, every })
    }

    /// Whether a position is due after `elements` elements.
    pub fn due(&self, elements: u64) -> bool {
        elements.is_multiple_of(self.every)
    }

    /// Takes the stream's position, prints its marker on `out` (flushed), then
    /// replaces the file.
    pub fn write(
        &mut self,
        stream: &mut ElementStream,
        out: &mut impl Write,
    ) -> anyhow::Result<()> {
        let position = stream.position().context("taking the reader's position")?;
        writeln!(out, "# checkpoint {}", position.generation)?;
        out.flush()?;
        let tmp = self.path.with_extension("tmp");
        {
            let mut f = std::fs::File::create(&tmp)
                .with_context(|| format!("writing {}", tmp.display()))?;
            f.write_all(&position.encode())?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)
            .with_context(|| format!("replacing {}", self.path.display()))?;
        let dir =
            self.path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::File::open(dir)?.sync_all()?;
        Ok(())
    }
}
