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
    /// `sbatch` could not run or refused the job.
    #[error("sbatch {script}: {problem}")]
    Submit {
        /// The script.
        script: String,
        /// What went wrong.
        problem: String,
    },
    /// Zero shards.
    #[error("--shards must be at least 1")]
    NoShards,
}

/// What the scripts run.
#[derive(Debug, Clone)]
pub struct SlurmJob {
    /// The `tilegen` executable, as the nodes see it (a shared file system).
    pub tilegen: PathBuf,
    /// The template.
    pub template: PathBuf,
    /// Array tasks.
    pub shards: u32,
    /// Partition, if any.
    pub partition: Option<String>,
    /// Where the shard databases, logs and scripts go.
    pub dir: PathBuf,
    /// The merged database.
    pub db: PathBuf,
    /// Extra arguments of every shard's `tilegen tune` (`--by`, `--jobs`, ...).
    pub tune_args: Vec<String>,
    /// CPUs per array task.
    pub cpus_per_task: u32,
    /// Time limit per task, minutes.
    pub minutes: u32,
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

/// The shard database of array task `i`.
pub fn shard_db(dir: &Path, i: u32) -> PathBuf {
    dir.join(format!("shard-{i}.db"))
}

/// The two sbatch scripts and the submit script's text.
pub fn scripts(job: &SlurmJob) -> Result<(String, String, String), SlurmError> {
    if job.shards == 0 {
        return Err(SlurmError::NoShards);
    }
    let dir = qpath(&job.dir)?;
    let tilegen = qpath(&job.tilegen)?;
    let template = qpath(&job.template)?;
    let db = qpath(&job.db)?;
    let partition = job
        .partition
        .as_ref()
        .map(|p| format!("#SBATCH --partition={p}\n"))
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
        dir_raw = job.dir.display(),
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
        dir_raw = job.dir.display(),
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
