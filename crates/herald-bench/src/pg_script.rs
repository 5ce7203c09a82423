//! Running the repository's `scripts/pg.sh` (throwaway PostgreSQL servers,
//! their standbys, promotion), for the scenarios that start their own
//! shards. Not here: what each scenario starts with it.

use std::path::Path;

use anyhow::{Context, ensure};

/// Runs `script ARGS`; its standard output, trimmed. A failure says what
/// was run and what the script wrote to standard error.
pub async fn run(script: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = tokio::process::Command::new(script)
        .args(args)
        .output()
        .await
        .with_context(|| format!("running {}", script.display()))?;
    ensure!(
        out.status.success(),
        "pg.sh {} failed ({}): {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
