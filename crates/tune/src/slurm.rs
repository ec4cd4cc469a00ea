//! Slurm: a job-array script that runs one shard per array task, and a merge job that depends
//! on the array and combines the shard databases.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

/// Why scripts could not be written or submitted.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// A path cannot be put in a shell script (a quote or a newline in it).
    #[error("{} cannot be quoted for a shell script", .0.display())]
    Unquotable(PathBuf),
    /// A path cannot be put in an `#SBATCH` line.
    #[error("{} cannot be named in an #SBATCH line: {why}", path.display())]
    UnusableInDirective {
        /// The path.
        path: PathBuf,
        /// The character and what sbatch would make of it.
        why: String,
    },
    /// `sbatch` could not run or refused the job.
    #[error("sbatch {script}: {problem}")]
    Submit {
        /// The script.
        script: String,
        /// What went wrong.
        problem: String,
    },
    /// A partition name outside Slurm's grammar.
    #[error(
        "partition {0:?} is not a Slurm partition list (names of letters, digits, '_', '-' and '.', separated by commas, at most {MAX_PARTITION_CHARS} characters)"
    )]
    Partition(String),
    /// A count outside the range the scripts support.
    #[error("{what} = {value} is out of range: it must be between 1 and {max} ({why})")]
    OutOfRange {
        /// The option.
        what: &'static str,
        /// The value given.
        value: u64,
        /// The largest value accepted.
        max: u64,
        /// Where the limit comes from.
        why: &'static str,
    },
}

/// The most shards: the merge job names every shard database on its command line, and 10,000
/// names (about 150 KB) stay far below the kernel's argument limit; Slurm's own default
/// MaxArraySize is 1001.
pub const MAX_SHARDS: u32 = 10_000;
/// The most CPUs per array task (Slurm's `--cpus-per-task` is a 16-bit count).
pub const MAX_CPUS_PER_TASK: u32 = u16::MAX as u32;
/// The longest time limit per task: one year, in minutes.
pub const MAX_MINUTES: u32 = 366 * 24 * 60;
/// The longest partition list accepted.
pub const MAX_PARTITION_CHARS: usize = 256;

/// A Slurm partition list (`--partition`): comma-separated names of letters, digits, `_`, `-`
/// and `.`. Only such names reach a script, so no value can open a line or a shell word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition(String);

impl Partition {
    /// The list as written in the scripts.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for Partition {
    type Err = SlurmError;

    fn from_str(s: &str) -> Result<Partition, SlurmError> {
        let name_ok = |n: &str| {
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        };
        if s.len() > MAX_PARTITION_CHARS || !s.split(',').all(name_ok) {
            return Err(SlurmError::Partition(s.to_string()));
        }
        Ok(Partition(s.to_string()))
    }
}

/// What the scripts run, validated when it is made.
#[derive(Debug, Clone)]
pub struct SlurmJob {
    tilegen: PathBuf,
    template: PathBuf,
    shards: u32,
    partition: Option<Partition>,
    dir: PathBuf,
    db: PathBuf,
    tune_args: Vec<String>,
    cpus_per_task: u32,
    minutes: u32,
}

fn in_range(
    what: &'static str,
    value: u32,
    max: u32,
    why: &'static str,
) -> Result<u32, SlurmError> {
    if (1..=max).contains(&value) {
        Ok(value)
    } else {
        Err(SlurmError::OutOfRange {
            what,
            value: value.into(),
            max: max.into(),
            why,
        })
    }
}

impl SlurmJob {
    /// A job of `shards` array tasks running `tilegen` (as the nodes see it, on a shared file
    /// system) on `template`, with its scripts, shard databases and logs in `dir` and the merged
    /// database at `db`; 2 CPUs and 240 minutes per task, no partition, no extra arguments.
    pub fn new(
        tilegen: PathBuf,
        template: PathBuf,
        dir: PathBuf,
        db: PathBuf,
        shards: u32,
    ) -> Result<SlurmJob, SlurmError> {
        Ok(SlurmJob {
            tilegen,
            template,
            shards: in_range(
                "--shards",
                shards,
                MAX_SHARDS,
                "the merge job lists every shard database",
            )?,
            partition: None,
            dir,
            db,
            tune_args: Vec::new(),
            cpus_per_task: 2,
            minutes: 240,
        })
    }

    /// Runs on `partition`.
    pub fn partition(mut self, partition: Partition) -> SlurmJob {
        self.partition = Some(partition);
        self
    }

    /// CPUs per array task (the shard's `--jobs`).
    pub fn cpus_per_task(mut self, cpus: u32) -> Result<SlurmJob, SlurmError> {
        self.cpus_per_task = in_range(
            "--cpus-per-task",
            cpus,
            MAX_CPUS_PER_TASK,
            "Slurm counts CPUs per task in 16 bits",
        )?;
        Ok(self)
    }

    /// Time limit per task, minutes.
    pub fn minutes(mut self, minutes: u32) -> Result<SlurmJob, SlurmError> {
        self.minutes = in_range("--minutes", minutes, MAX_MINUTES, "one year")?;
        Ok(self)
    }

    /// Extra arguments of every shard's `tilegen tune` (`--by`, `--jobs`, ...), quoted in the
    /// script.
    pub fn tune_args(mut self, args: Vec<String>) -> SlurmJob {
        self.tune_args = args;
        self
    }

    /// The directory of the scripts, shard databases and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The merged database.
    pub fn db(&self) -> &Path {
        &self.db
    }

    /// Array tasks.
    pub fn shards(&self) -> u32 {
        self.shards
    }
}

/// The scripts, as written.
#[derive(Debug, Clone, Serialize)]
pub struct Scripts {
    /// The job array.
    pub array: PathBuf,
    /// The merge job.
    pub merge: PathBuf,
    /// A script that submits both.
    pub submit: PathBuf,
}

/// Single-quotes `s` for sh.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn qpath(p: &Path) -> Result<String, SlurmError> {
    let s = p
        .to_str()
        .ok_or_else(|| SlurmError::Unquotable(p.to_path_buf()))?;
    if s.contains('\n') {
        return Err(SlurmError::Unquotable(p.to_path_buf()));
    }
    Ok(quote(s))
}

/// `p` as it can stand in an `#SBATCH` line. sbatch splits those lines at blanks, strips
/// quotes and expands `%` patterns in file names, and a newline would end the line, so a
/// path holding any of them is refused rather than written as something else.
fn directive_path(p: &Path) -> Result<String, SlurmError> {
    let s = p
        .to_str()
        .ok_or_else(|| SlurmError::Unquotable(p.to_path_buf()))?;
    if let Some(c) = s
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || matches!(c, '%' | '\'' | '"' | '\\'))
    {
        return Err(SlurmError::UnusableInDirective {
            path: p.to_path_buf(),
            why: format!(
                "{c:?} would be read by sbatch (blanks split the line, quotes and backslashes are stripped, '%' starts a file-name pattern)"
            ),
        });
    }
    Ok(s.to_string())
}

/// The shard database of array task `i`.
pub fn shard_db(dir: &Path, i: u32) -> PathBuf {
    dir.join(format!("shard-{i}.db"))
}

/// The two sbatch scripts and the submit script's text.
pub fn scripts(job: &SlurmJob) -> Result<(String, String, String), SlurmError> {
    let dir = qpath(&job.dir)?;
    let dir_raw = directive_path(&job.dir)?;
    let tilegen = qpath(&job.tilegen)?;
    let template = qpath(&job.template)?;
    let db = qpath(&job.db)?;
    let partition = job
        .partition
        .as_ref()
        .map(|p| format!("#SBATCH --partition={}\n", p.as_str()))
        .unwrap_or_default();
    let extra: String = job
        .tune_args
        .iter()
        .map(|a| format!(" {}", quote(a)))
        .collect();
    let n = job.shards;
    let array = format!(
        "#!/bin/sh\n\
         # tilegen tune: one shard of the sweep per array task (written by `tilegen tune slurm`).\n\
         #SBATCH --job-name=tilegen-tune\n\
         #SBATCH --array=0-{last}\n\
         #SBATCH --cpus-per-task={cpus}\n\
         #SBATCH --time={minutes}\n\
         #SBATCH --output={dir_raw}/shard-%a.log\n\
         {partition}\
         set -eu\n\
         cd {dir}\n\
         exec {tilegen} tune {template} --shard \"$SLURM_ARRAY_TASK_ID/{n}\" --db \"shard-$SLURM_ARRAY_TASK_ID.db\" --jobs \"${{SLURM_CPUS_PER_TASK:-1}}\" --json{extra}\n",
        last = n - 1,
        cpus = job.cpus_per_task,
        minutes = job.minutes,
    );
    let shard_list: Vec<String> = (0..n).map(|i| format!("shard-{i}.db")).collect();
    let merge = format!(
        "#!/bin/sh\n\
         # tilegen tune: merge the shard databases once the array has finished.\n\
         #SBATCH --job-name=tilegen-merge\n\
         #SBATCH --cpus-per-task=1\n\
         #SBATCH --time=30\n\
         #SBATCH --output={dir_raw}/merge.log\n\
         {partition}\
         set -eu\n\
         cd {dir}\n\
         exec {tilegen} tune merge {shards} -o {db} --json\n",
        shards = shard_list.join(" "),
    );
    let submit = format!(
        "#!/bin/sh\n\
         # Submits the array, then the merge after it (afterok: only when every shard succeeded).\n\
         set -eu\n\
         cd {dir}\n\
         array=$(sbatch --parsable tune-array.sbatch)\n\
         array=${{array%%;*}}\n\
         sbatch --parsable --dependency=afterok:$array tune-merge.sbatch\n"
    );
    Ok((array, merge, submit))
}

/// Writes the scripts into `job.dir` (atomically, each).
pub fn write(job: &SlurmJob) -> Result<Scripts, Box<dyn std::error::Error + Send + Sync>> {
    let (array, merge, submit) = scripts(job)?;
    std::fs::create_dir_all(&job.dir)?;
    let out = Scripts {
        array: job.dir.join("tune-array.sbatch"),
        merge: job.dir.join("tune-merge.sbatch"),
        submit: job.dir.join("submit.sh"),
    };
    for (p, text) in [
        (&out.array, &array),
        (&out.merge, &merge),
        (&out.submit, &submit),
    ] {
        tilegen_output::Output::check(p)?.write(text.as_bytes())?;
    }
    Ok(out)
}

/// Job ids of a submission.
#[derive(Debug, Clone, Serialize)]
pub struct Submitted {
    /// The array job.
    pub array: String,
    /// The merge job.
    pub merge: String,
    /// The merge job's exit status when waited for.
    pub merge_exit: Option<i32>,
}

fn sbatch(args: &[&str], script: &Path, dir: &Path) -> Result<(String, i32), SlurmError> {
    let err = |problem: String| SlurmError::Submit {
        script: script.display().to_string(),
        problem,
    };
    let out = Command::new("sbatch")
        .args(args)
        .arg(script)
        .current_dir(dir)
        .output()
        .map_err(|e| err(format!("could not run sbatch: {e}")))?;
    let code = out.status.code().unwrap_or(-1);
    let text = String::from_utf8_lossy(&out.stdout);
    let id = text.trim().split(';').next().unwrap_or("").to_string();
    if id.is_empty() && code != 0 {
        return Err(err(format!(
            "failed with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok((id, code))
}

/// Submits the array, then the merge with `afterok` on it; with `wait`, waits for the merge
/// to end (`sbatch --wait`) and reports its exit status.
pub fn submit(scripts: &Scripts, dir: &Path, wait: bool) -> Result<Submitted, SlurmError> {
    let (array, code) = sbatch(&["--parsable"], &scripts.array, dir)?;
    if code != 0 {
        return Err(SlurmError::Submit {
            script: scripts.array.display().to_string(),
            problem: format!("exited with {code}"),
        });
    }
    let dep = format!("--dependency=afterok:{array}");
    let mut args = vec!["--parsable", dep.as_str()];
    if wait {
        args.push("--wait");
    }
    let (merge, code) = sbatch(&args, &scripts.merge, dir)?;
    Ok(Submitted {
        array,
        merge,
        merge_exit: wait.then_some(code),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(shards: u32) -> Result<SlurmJob, SlurmError> {
        SlurmJob::new(
            "/opt/tilegen".into(),
            "/t/gpt.toml".into(),
            "/shared/run".into(),
            "/shared/run/tune.db".into(),
            shards,
        )
    }

    #[test]
    fn partitions_follow_slurms_grammar() {
        for ok in ["gpu", "mi355x,mi300x", "a.b-c_d", "P1"] {
            assert_eq!(ok.parse::<Partition>().unwrap().as_str(), ok);
        }
        let long = "p".repeat(MAX_PARTITION_CHARS + 1);
        for bad in [
            "gpu\ntouch /tmp/X",
            "gpu touch",
            "gpu;id",
            "$(id)",
            "`id`",
            "'gpu'",
            "",
            ",",
            "gpu,",
            "gpu\r",
            "gp\u{e9}u",
            long.as_str(),
        ] {
            assert!(
                matches!(bad.parse::<Partition>(), Err(SlurmError::Partition(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_partition_is_one_directive_line_and_nothing_else() {
        let j = job(3).unwrap().partition("mi355x,gpu".parse().unwrap());
        let (array, merge, _) = scripts(&j).unwrap();
        for text in [&array, &merge] {
            let lines: Vec<&str> = text.lines().filter(|l| l.contains("mi355x")).collect();
            assert_eq!(lines, ["#SBATCH --partition=mi355x,gpu"], "{text}");
            // Every line before `set -eu` is a comment: nothing runs before it.
            let before: Vec<&str> = text.lines().take_while(|l| *l != "set -eu").collect();
            assert!(before.iter().all(|l| l.starts_with('#')), "{text}");
        }
        assert!(array.contains("#SBATCH --array=0-2\n"));
        assert!(merge.contains("shard-0.db shard-1.db shard-2.db"));
    }

    #[test]
    fn counts_out_of_range_are_refused_with_their_limit() {
        for n in [0, MAX_SHARDS + 1, u32::MAX] {
            let e = job(n).unwrap_err();
            assert!(
                matches!(
                    e,
                    SlurmError::OutOfRange {
                        what: "--shards",
                        ..
                    }
                ),
                "{e}"
            );
            assert!(e.to_string().contains("10000"), "{e}");
        }
        assert!(job(MAX_SHARDS).is_ok());
        assert!(job(1).unwrap().cpus_per_task(0).is_err());
        assert!(
            job(1)
                .unwrap()
                .cpus_per_task(MAX_CPUS_PER_TASK + 1)
                .is_err()
        );
        assert!(job(1).unwrap().minutes(0).is_err());
        assert!(job(1).unwrap().minutes(MAX_MINUTES + 1).is_err());
        let j = job(1)
            .unwrap()
            .cpus_per_task(8)
            .unwrap()
            .minutes(30)
            .unwrap();
        let (array, _, _) = scripts(&j).unwrap();
        assert!(
            array.contains("#SBATCH --cpus-per-task=8\n#SBATCH --time=30\n"),
            "{array}"
        );
    }

    #[test]
    fn directories_sbatch_would_misread_are_refused() {
        for dir in [
            "/shared/a b",
            "/shared/100%",
            "/shared/x\ny",
            "/shared/q'",
            "/shared/\"q",
        ] {
            let j = SlurmJob::new(
                "/opt/tilegen".into(),
                "/t.toml".into(),
                dir.into(),
                "/db".into(),
                1,
            )
            .unwrap();
            assert!(scripts(&j).is_err(), "{dir:?}");
        }
    }

    #[test]
    fn extra_arguments_are_single_quoted_words() {
        let j = job(1)
            .unwrap()
            .tune_args(vec!["--by=model".into(), "x'; touch /tmp/X; '".into()]);
        let (array, _, _) = scripts(&j).unwrap();
        assert!(
            array.contains(" '--by=model' 'x'\\''; touch /tmp/X; '\\'''\n"),
            "{array}"
        );
    }
}
