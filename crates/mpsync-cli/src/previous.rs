//! Earlier results are kept, not overwritten. A run writes
//! `OUT/<experiment>@<preempt>/`; where that folder already exists (a re-run),
//! the old one is first moved to `OUT/previous/<UTC time the command
//! started>/`, with one notice per command. `OUT/previous` holds no `run.json`
//! of its own, so the report (which reads `OUT/*/run.json`) shows only the
//! latest run of each experiment.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// The folder under `OUT` that earlier results are moved to.
pub const PREVIOUS: &str = "previous";

/// Moves earlier results aside for one command (`run` or `repro`).
#[derive(Debug)]
pub struct Previous {
    out: PathBuf,
    stamp: String,
    /// Where this command moves earlier results, once it has moved one.
    dir: Option<PathBuf>,
}

impl Previous {
    /// For a command writing under `out`, started at Unix time `now`.
    pub fn new(out: &Path, now: u64) -> Self {
        Self {
            out: out.to_path_buf(),
            stamp: utc_stamp(now),
            dir: None,
        }
    }

    /// Makes room for a run about to be written to `run_dir` (a folder directly
    /// under `OUT`): an existing folder there is moved to this command's
    /// `OUT/previous/<time>/`. Returns where it went.
    pub fn make_room(&mut self, run_dir: &Path) -> anyhow::Result<Option<PathBuf>> {
        if std::fs::symlink_metadata(run_dir).is_err() {
            return Ok(None);
        }
        let name = run_dir
            .file_name()
            .with_context(|| format!("{} has no folder name", run_dir.display()))?;
        let dir = match &self.dir {
            Some(d) => d.clone(),
            None => {
                let d = self.fresh_dir()?;
                eprintln!(
                    "note: {} already held results: moved them to {}/ (this command moves any other results it replaces there too)",
                    run_dir.display(),
                    d.display()
                );
                self.dir = Some(d.clone());
                d
            }
        };
        let to = dir.join(name);
        std::fs::rename(run_dir, &to).with_context(|| {
            format!(
                "cannot move the earlier results {} to {}",
                run_dir.display(),
                to.display()
            )
        })?;
        Ok(Some(to))
    }

    /// `OUT/previous/<stamp>`, or `<stamp>-2`, `-3`, … where an earlier command
    /// of the same second took that one; created.
    fn fresh_dir(&self) -> anyhow::Result<PathBuf> {
        let root = self.out.join(PREVIOUS);
        std::fs::create_dir_all(&root)
            .with_context(|| format!("cannot create {}", root.display()))?;
        for n in 1u32.. {
            let d = if n == 1 {
                root.join(&self.stamp)
            } else {
                root.join(format!("{}-{n}", self.stamp))
            };
            match std::fs::create_dir(&d) {
                Ok(()) => return Ok(d),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("cannot create {}", d.display())),
            }
        }
        unreachable!("u32 ran out of suffixes")
    }
}

/// Unix time `t` as ISO 8601 basic UTC, `20261127T004512Z` (sorts in time
/// order; no separators a shell or another OS would trip on).
pub fn utc_stamp(t: u64) -> String {
    let (days, secs) = (t / 86_400, t % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01: the era arithmetic
/// of a 400-year cycle (146,097 days), with years starting in March so the
/// leap day is the last day of a year.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z / 146_097;
    let doe = z % 146_097; // day of the era, 0..=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // 0..=365, from March 1
    let mp = (5 * doy + 2) / 153; // 0 = March .. 11 = February
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_utc_dates() {
        assert_eq!(utc_stamp(0), "19700101T000000Z");
        // 2000-02-29 (a leap day of a century year) 12:34:56.
        assert_eq!(utc_stamp(951_827_696), "20000229T123456Z");
        // 2100-03-01: 2100 is not a leap year.
        assert_eq!(utc_stamp(4_107_542_400), "21000301T000000Z");
        assert_eq!(utc_stamp(1_767_225_599), "20251231T235959Z");
    }

    #[test]
    fn an_existing_result_moves_and_a_new_one_does_not() {
        let out = std::env::temp_dir().join(format!("mpsync-previous-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let run = out.join("x@none");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(run.join("run.json"), "old").unwrap();
        let mut p = Previous::new(&out, 0);
        assert_eq!(p.make_room(&out.join("y@none")).unwrap(), None);
        let to = p.make_room(&run).unwrap().unwrap();
        assert_eq!(to, out.join("previous/19700101T000000Z/x@none"));
        assert_eq!(std::fs::read_to_string(to.join("run.json")).unwrap(), "old");
        assert!(!run.exists());
        // A second command in the same second gets a folder of its own.
        std::fs::create_dir_all(&run).unwrap();
        let to = Previous::new(&out, 0).make_room(&run).unwrap().unwrap();
        assert_eq!(to, out.join("previous/19700101T000000Z-2/x@none"));
        let _ = std::fs::remove_dir_all(&out);
    }
}
