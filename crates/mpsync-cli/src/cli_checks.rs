//! Which common flags apply to which experiment, from the catalog's data
//! ([`Experiment::knobs`] and [`Experiment::uses_preempt`]).
//!
//! `run` refuses a flag its experiment does not read, in one line. `repro`
//! refuses a flag only when none of the experiments it selects reads it; when
//! some do, it says once, in a line, which ones (the others ignore it). A list
//! flag of which an experiment reads only the first value (`--procs 1,2` for
//! `wks94-mplevel`) is a warning, not a refusal.

use crate::experiments::{Experiment, Knob, Params};

/// A common flag of `run` and `repro` that not every experiment reads
/// (`--quick` and `--out` apply to all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    /// `--preempt`.
    Preempt,
    /// `--mp`.
    Mp,
    /// `--procs`.
    Procs,
    /// `--threads`.
    Threads,
    /// `--quantum-ms`.
    QuantumMs,
    /// `--alloc`.
    Alloc,
    /// `--trials`.
    Trials,
    /// `--scale`.
    Scale,
    /// `--seed`.
    Seed,
    /// `--match-contention`.
    MatchContention,
}

/// How an experiment reads a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    /// Not at all.
    No,
    /// Every value.
    All,
    /// Only the first value of the list.
    First,
}

impl Flag {
    /// Every flag, in the order `--help` lists them.
    pub const ALL: [Flag; 10] = [
        Flag::Preempt,
        Flag::Mp,
        Flag::Procs,
        Flag::Threads,
        Flag::Alloc,
        Flag::QuantumMs,
        Flag::Trials,
        Flag::Scale,
        Flag::Seed,
        Flag::MatchContention,
    ];

    /// As written on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Flag::Preempt => "--preempt",
            Flag::Mp => "--mp",
            Flag::Procs => "--procs",
            Flag::Threads => "--threads",
            Flag::QuantumMs => "--quantum-ms",
            Flag::Alloc => "--alloc",
            Flag::Trials => "--trials",
            Flag::Scale => "--scale",
            Flag::Seed => "--seed",
            Flag::MatchContention => "--match-contention",
        }
    }

    /// What an experiment that does not read the flag lacks, as "<id> ...".
    fn lacking(self) -> &'static str {
        match self {
            Flag::Preempt => "chooses its own preemption",
            Flag::Mp => "has no MP levels",
            Flag::Procs => "has no processor counts",
            Flag::Threads => "has no thread counts",
            Flag::QuantumMs => "has no scheduling quantum",
            Flag::Alloc => "has no node allocator to choose",
            Flag::Trials => "has no trials to repeat",
            Flag::Scale => "has no operation counts to scale",
            Flag::Seed => "has no seeded randomness",
            Flag::MatchContention => "has no lock program to contention-match",
        }
    }

    /// What an experiment that reads only the flag's first value runs at.
    fn single(self) -> &'static str {
        match self {
            Flag::Mp => "one MP level",
            Flag::Procs => "one processor count",
            _ => "one value",
        }
    }

    /// How `exp` reads this flag.
    pub fn read_by(self, exp: &Experiment) -> Reads {
        let has = |k: Knob| exp.knobs.contains(&k);
        let (all, first) = match self {
            Flag::Preempt => {
                return if exp.uses_preempt {
                    Reads::All
                } else {
                    Reads::No
                };
            }
            Flag::Mp => (has(Knob::Mp), has(Knob::MpFirst)),
            Flag::Procs => (has(Knob::Procs), has(Knob::ProcsFirst)),
            Flag::Threads => (has(Knob::Threads), false),
            Flag::QuantumMs => (has(Knob::QuantumMs), false),
            Flag::Alloc => (has(Knob::Alloc), false),
            Flag::Trials => (has(Knob::Trials), false),
            Flag::Scale => (has(Knob::Scale), false),
            Flag::Seed => (has(Knob::Seed), false),
            Flag::MatchContention => (has(Knob::MatchContention), false),
        };
        match (all, first) {
            (true, _) => Reads::All,
            (false, true) => Reads::First,
            (false, false) => Reads::No,
        }
    }

    /// The values given of a list flag, if more than one: (first, the rest).
    fn several(self, p: &Params) -> Option<(String, String)> {
        let split = |v: Vec<String>| (v.len() > 1).then(|| (v[0].clone(), v[1..].join(",")));
        match self {
            Flag::Mp => split(p.mp.as_ref()?.iter().map(f64::to_string).collect()),
            Flag::Procs => split(p.procs.as_ref()?.iter().map(u32::to_string).collect()),
            _ => None,
        }
    }
}

/// "a", "a and b", "a, b and c".
fn and_list<S: AsRef<str>>(items: &[S]) -> String {
    match items {
        [] => String::new(),
        [one] => one.as_ref().to_string(),
        [init @ .., last] => format!(
            "{} and {}",
            init.iter()
                .map(AsRef::as_ref)
                .collect::<Vec<_>>()
                .join(", "),
            last.as_ref()
        ),
    }
}

/// The flags `exp` reads, as written ("--threads, --trials and --scale").
fn flags_read(exp: &Experiment) -> String {
    let read: Vec<&str> = Flag::ALL
        .iter()
        .filter(|f| f.read_by(exp) != Reads::No)
        .map(|f| f.name())
        .collect();
    if read.is_empty() {
        "only --quick and --out".into()
    } else {
        and_list(&read)
    }
}

/// For `run`: the one-line refusal when `exp` ignores a flag in `given`, else
/// the warnings to print (one line per list flag of which only the first
/// value is used).
pub fn check_run(exp: &Experiment, given: &[Flag], p: &Params) -> Result<Vec<String>, String> {
    let ignored: Vec<Flag> = given
        .iter()
        .copied()
        .filter(|f| f.read_by(exp) == Reads::No)
        .collect();
    if !ignored.is_empty() {
        let lacks: Vec<&str> = ignored.iter().map(|f| f.lacking()).collect();
        let names: Vec<&str> = ignored.iter().map(|f| f.name()).collect();
        return Err(format!(
            "{} {}: {} {} not apply (it uses {})",
            exp.id,
            and_list(&lacks),
            and_list(&names),
            if names.len() == 1 { "does" } else { "do" },
            flags_read(exp)
        ));
    }
    Ok(given
        .iter()
        .filter(|f| f.read_by(exp) == Reads::First)
        .filter_map(|&f| {
            let (first, rest) = f.several(p)?;
            Some(format!(
                "warning: {} runs at {}: it uses {} {first} and ignores {rest}",
                exp.id,
                f.single(),
                f.name()
            ))
        })
        .collect())
}

/// For `repro` of `exps` (the selection named `what`): the one-line refusal
/// when no experiment reads a flag in `given`, else the notes to print (one
/// line per flag that only some read, one per list flag of which some read
/// only the first value).
pub fn check_repro(
    what: &str,
    exps: &[Experiment],
    given: &[Flag],
    p: &Params,
) -> Result<Vec<String>, String> {
    let unread: Vec<Flag> = given
        .iter()
        .copied()
        .filter(|f| exps.iter().all(|e| f.read_by(e) == Reads::No))
        .collect();
    if !unread.is_empty() {
        let lacks: Vec<&str> = unread.iter().map(|f| f.lacking()).collect();
        let names: Vec<&str> = unread.iter().map(|f| f.name()).collect();
        return Err(format!(
            "repro {what}: every experiment it runs {}: {} {} not apply",
            and_list(&lacks),
            and_list(&names),
            if names.len() == 1 { "does" } else { "do" }
        ));
    }
    let mut notes = Vec::new();
    for &f in given {
        let (users, others): (Vec<&Experiment>, Vec<&Experiment>) =
            exps.iter().partition(|e| f.read_by(e) != Reads::No);
        if !others.is_empty() {
            let ids: Vec<&str> = users.iter().map(|e| e.id).collect();
            notes.push(format!(
                "note: {} applies to {}; the other {} experiment{} ignore{} it",
                f.name(),
                and_list(&ids),
                others.len(),
                if others.len() == 1 { "" } else { "s" },
                if others.len() == 1 { "s" } else { "" }
            ));
        }
        if let Some((first, rest)) = f.several(p) {
            let single: Vec<&str> = users
                .iter()
                .filter(|e| f.read_by(e) == Reads::First)
                .map(|e| e.id)
                .collect();
            if !single.is_empty() {
                notes.push(format!(
                    "warning: {} run{} at {}: {} {first} (the first), not {rest}",
                    and_list(&single),
                    if single.len() == 1 { "s" } else { "" },
                    f.single(),
                    f.name()
                ));
            }
        }
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::catalog;

    fn exp(id: &str) -> Experiment {
        catalog().into_iter().find(|e| e.id == id).unwrap()
    }

    fn params() -> Params {
        Params {
            preempt: None,
            mp: None,
            procs: None,
            threads: None,
            quantum_ms: None,
            trials: 7,
            scale: 1.0,
            seed: 1,
            out: "results".into(),
            quick: false,
            cores: 2,
            alloc: Default::default(),
            match_contention: false,
        }
    }

    #[test]
    fn one_line_names_what_is_missing_and_what_applies() {
        let e = check_run(&exp("lock-latency"), &[Flag::Mp], &params()).unwrap_err();
        assert_eq!(
            e,
            "lock-latency has no MP levels: --mp does not apply (it uses --trials, --scale and --seed)"
        );
        let e = check_run(
            &exp("lock-oversub"),
            &[Flag::Preempt, Flag::Threads, Flag::Seed],
            &params(),
        )
        .unwrap_err();
        assert_eq!(
            e,
            "lock-oversub chooses its own preemption and has no seeded randomness: --preempt and --seed do not apply (it uses --threads, --trials and --scale)"
        );
        assert_eq!(
            check_run(&exp("lock-oversub"), &[Flag::Threads], &params()),
            Ok(vec![])
        );
    }

    #[test]
    fn a_first_value_only_flag_warns() {
        let mut p = params();
        p.procs = Some(vec![2, 1]);
        assert_eq!(
            check_run(&exp("wks94-mplevel"), &[Flag::Procs], &p),
            Ok(vec![
                "warning: wks94-mplevel runs at one processor count: it uses --procs 2 and ignores 1"
                    .to_string()
            ])
        );
        // wks95-mutex and wks95-rwlock vary the processors when several are given.
        for id in ["wks95-mutex", "wks95-rwlock"] {
            assert_eq!(check_run(&exp(id), &[Flag::Procs], &p), Ok(vec![]), "{id}");
        }
    }

    #[test]
    fn repro_refuses_only_what_no_selected_experiment_reads() {
        let hart: Vec<Experiment> = catalog()
            .into_iter()
            .filter(|e| e.paper == "hart")
            .collect();
        let e = check_repro("hart", &hart, &[Flag::Mp], &params()).unwrap_err();
        assert_eq!(
            e,
            "repro hart: every experiment it runs has no MP levels: --mp does not apply"
        );
        let notes = check_repro("hart", &hart, &[Flag::Threads], &params()).unwrap();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with("note: --threads applies to hart-queues-threads, ")
                && notes[0].ends_with("; the other 9 experiments ignore it"),
            "{notes:?}"
        );
        // Read by every selected experiment: nothing to say.
        assert_eq!(
            check_repro("hart", &hart, &[Flag::Scale], &params()),
            Ok(vec![])
        );
    }

    /// Every experiment reads the flags its run function reads; a catalog entry
    /// whose list names no knob at all is a mistake.
    #[test]
    fn every_experiment_reads_something() {
        for e in catalog() {
            assert!(
                Flag::ALL.iter().any(|f| f.read_by(&e) != Reads::No),
                "{}",
                e.id
            );
            let both = |all: Knob, first: Knob| e.knobs.contains(&all) && e.knobs.contains(&first);
            assert!(
                !both(Knob::Mp, Knob::MpFirst) && !both(Knob::Procs, Knob::ProcsFirst),
                "{}: a list knob read both ways",
                e.id
            );
        }
    }
}
