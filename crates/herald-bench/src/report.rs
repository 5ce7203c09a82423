//! Reporting a scenario: the median over runs, a small table for people, and
//! with `--json` one JSON object holding the machine, every parameter, each
//! run and the median. Scenarios hand over each run as a flat-ish JSON object;
//! nothing here knows what a scenario measured.

use clap::Args;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::machine::Machine;

/// Flags every scenario takes.
#[derive(Debug, Clone, Args, Serialize)]
pub struct RunArgs {
    /// Repeat the measurement this many times and report the median too.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub runs: u32,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    #[serde(skip)]
    pub json: bool,
}

/// Runs a scenario's measurement `run.runs` times (`once(r)`, r from 0),
/// saying when each is done; the runs, for [`emit`].
pub async fn repeat<Fut>(run: &RunArgs, mut once: impl FnMut(u32) -> Fut) -> anyhow::Result<Vec<Value>>
where
    Fut: std::future::Future<Output = anyhow::Result<Value>>,
{
    use anyhow::Context;
    let mut runs = Vec::new();
    for r in 0..run.runs {
        let out = once(r).await.with_context(|| format!("run {}", r + 1))?;
        eprintln!("run {}/{} done", r + 1, run.runs);
        runs.push(out);
    }
    Ok(runs)
}

/// A column of the human table: the run object's key and its header.
pub struct Column {
    pub key: &'static str,
    pub header: &'static str,
}

/// Shorthand for a [`Column`].
pub const fn col(key: &'static str, header: &'static str) -> Column {
    Column { key, header }
}

/// Prints the report of `runs` of `scenario`: JSON when `json`, else a table.
pub fn emit(scenario: &str, params: &impl Serialize, runs: &[Value], columns: &[Column], json: bool) {
    let machine = Machine::detect();
    let median = median(runs);
    if json {
        let out = json!({
            "scenario": scenario,
            "machine": machine,
            "params": params,
            "runs": runs,
            "median": median,
        });
        println!("{out}");
        return;
    }
    println!("herald-bench {scenario}: {}", machine.summary());
    let mut shown = Vec::new();
    flatten("", &serde_json::to_value(params).unwrap_or(Value::Null), &mut shown);
    println!("params: {}", shown.join(" "));
    let mut rows: Vec<Vec<String>> = Vec::new();
    rows.push(std::iter::once("run".to_string()).chain(columns.iter().map(|c| c.header.to_string())).collect());
    let labelled = runs.iter().enumerate().map(|(i, r)| ((i + 1).to_string(), r));
    for (label, run) in labelled.chain(std::iter::once(("median".to_string(), &median))) {
        rows.push(std::iter::once(label).chain(columns.iter().map(|c| cell(run.get(c.key)))).collect());
    }
    print_rows(&rows);
    for (i, run) in runs.iter().enumerate() {
        notes(i + 1, run);
    }
}

/// `key=value` for every set leaf of `v`; nested keys are joined with dots.
fn flatten(prefix: &str, v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                flatten(&key, v, out);
            }
        }
        Value::Null => {}
        Value::Array(a) if a.is_empty() => {}
        Value::String(s) => out.push(format!("{prefix}={s}")),
        other => out.push(format!("{prefix}={other}")),
    }
}

/// What a person should not miss about a run: failures and the server's warnings.
fn notes(run: usize, v: &Value) {
    if let Some(f) = v.get("failures").filter(|f| f["total"].as_u64().unwrap_or(0) > 0) {
        println!("run {run}: {} failed {}; first: {}", f["total"], f["by_stage"], f["first"].as_str().unwrap_or("-"));
    }
    if let Some(log) =
        v.get("server_log").filter(|l| l["warnings"].as_u64().unwrap_or(0) + l["errors"].as_u64().unwrap_or(0) > 0)
    {
        println!("run {run}: server logged {} warnings, {} errors; first:", log["warnings"], log["errors"]);
        for line in log["first"].as_array().into_iter().flatten() {
            println!("    {}", line.as_str().unwrap_or_default());
        }
    }
    if let Some(e) = v.pointer("/watcher/error").and_then(Value::as_str) {
        println!("run {run}: the watcher stopped early: {e}");
    }
}

/// One value as a table cell: numbers with two decimals when they have any, strings bare.
pub fn cell(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "-".into(),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(f) if f.fract() != 0.0 => format!("{f:.2}"),
            _ => n.to_string(),
        },
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// Prints `rows` (the first the header) as right-aligned columns.
pub fn print_rows(rows: &[Vec<String>]) {
    let cols = rows.first().map_or(0, |r| r.len());
    let widths: Vec<usize> = (0..cols).map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    for row in rows {
        let line: Vec<String> = row.iter().zip(&widths).map(|(c, w)| format!("{c:>w$}")).collect();
        println!("{}", line.join("  "));
    }
}

/// The field-wise median of run objects: numbers take their median (the mean
/// of the middle two for an even count), booleans are true only if true in
/// every run, objects recurse, anything else is the first run's value.
pub fn median(runs: &[Value]) -> Value {
    let Some(first) = runs.first() else { return Value::Null };
    match first {
        Value::Object(obj) => {
            let mut out = Map::new();
            for key in obj.keys() {
                let values: Vec<Value> = runs.iter().filter_map(|r| r.get(key).cloned()).collect();
                out.insert(key.clone(), median(&values));
            }
            Value::Object(out)
        }
        Value::Number(_) => {
            let mut nums: Vec<f64> = runs.iter().filter_map(Value::as_f64).collect();
            nums.sort_by(f64::total_cmp);
            let n = nums.len();
            let m = if n % 2 == 1 { nums[n / 2] } else { (nums[n / 2 - 1] + nums[n / 2]) / 2.0 };
            if m.fract() == 0.0 && m.abs() < 9.0e15 { json!(m as i64) } else { json!(m) }
        }
        Value::Bool(_) => Value::Bool(runs.iter().all(|r| r.as_bool() == Some(true))),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        let runs = vec![
            json!({"kb": 3.0, "ok": true, "n": 10, "f": {"connect": 1}, "s": "a"}),
            json!({"kb": 1.0, "ok": false, "n": 30, "f": {"connect": 5}, "s": "b"}),
            json!({"kb": 2.0, "ok": true, "n": 20, "f": {"connect": 3}, "s": "c"}),
        ];
        assert_eq!(median(&runs), json!({"kb": 2, "ok": false, "n": 20, "f": {"connect": 3}, "s": "a"}));
        assert_eq!(median(&runs[..2]), json!({"kb": 2, "ok": false, "n": 20, "f": {"connect": 3}, "s": "a"}));
        assert_eq!(median(&[json!({"x": 1.5}), json!({"x": 2.0})]), json!({"x": 1.75}));
    }
}
