//! Harbor's job statistics over trial results, computed as Harbor 0.26 computes them
//! (`JobStats.increment`, the `mean` metric, `compute_pass_at_k_by_evals`), so the exported
//! job `result.json` says what Harbor itself would.

use std::collections::BTreeMap;

use super::model::{JobStats, TrialResult};

/// `agent__model__dataset` (or `agent__dataset` without a model).
pub(crate) fn evals_key(r: &TrialResult) -> String {
    let dataset = r.source.as_deref().unwrap_or("adhoc");
    match &r.agent_info.model_info {
        Some(m) => format!("{}__{}__{dataset}", r.agent_info.name, m.name),
        None => format!("{}__{dataset}", r.agent_info.name),
    }
}

/// A reward value as a Python float key (`1.0`, `0.5`).
pub(crate) fn float_key(v: f64) -> String {
    format!("{v:?}")
}

fn valid_rewards(r: &TrialResult) -> Option<&BTreeMap<String, f64>> {
    if !r.reward_valid {
        return None;
    }
    r.verifier_result.as_ref()?.rewards.as_ref()
}

pub(crate) fn job_stats(results: &[TrialResult], n_retries: u64) -> JobStats {
    let mut stats = JobStats::default();
    let mut rewards_by: BTreeMap<String, Vec<&BTreeMap<String, f64>>> = BTreeMap::new();
    let mut by_key: BTreeMap<String, Vec<&TrialResult>> = BTreeMap::new();
    for r in results {
        stats.n_completed_trials += 1;
        let key = evals_key(r);
        by_key.entry(key.clone()).or_default().push(r);
        let eval = stats.evals.entry(key.clone()).or_default();
        if let Some(rewards) = valid_rewards(r) {
            eval.n_trials += 1;
            for (k, v) in rewards {
                eval.reward_stats
                    .entry(k.clone())
                    .or_default()
                    .entry(float_key(*v))
                    .or_default()
                    .push(r.trial_name.clone());
            }
            rewards_by.entry(key.clone()).or_default().push(rewards);
        }
        let mut types: Vec<&str> = r
            .exception_info
            .iter()
            .chain(
                r.step_results
                    .iter()
                    .flatten()
                    .filter_map(|s| s.exception_info.as_ref()),
            )
            .map(|e| e.exception_type.as_str())
            .collect();
        types.sort_unstable();
        types.dedup();
        for t in &types {
            eval.exception_stats
                .entry(t.to_string())
                .or_default()
                .push(r.trial_name.clone());
        }
        if !types.is_empty() {
            eval.n_errors += 1;
            stats.n_errored_trials += 1;
            if types.contains(&"CancelledError") {
                stats.n_cancelled_trials += 1;
            }
        }
        if let Some(ctx) = &r.agent_result {
            add(&mut stats.n_input_tokens, ctx.n_input_tokens);
            add(&mut stats.n_cache_tokens, ctx.n_cache_tokens);
            add(&mut stats.n_output_tokens, ctx.n_output_tokens);
            if let Some(c) = ctx.cost_usd {
                stats.cost_usd = Some(stats.cost_usd.unwrap_or(0.0) + c);
            }
        }
    }
    stats.n_retries = n_retries;
    for (key, rewards) in &rewards_by {
        if let Some(eval) = stats.evals.get_mut(key) {
            eval.metrics.push(mean(rewards));
        }
    }
    for (key, trials) in &by_key {
        let pass = pass_at_k(trials);
        if let Some(eval) = stats.evals.get_mut(key) {
            eval.pass_at_k = pass.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        }
    }
    stats
}

fn add(total: &mut Option<u64>, n: Option<u64>) {
    if let Some(n) = n {
        *total = Some(total.unwrap_or(0) + n);
    }
}

/// Harbor's `mean` metric over the valid rewards: one key → `{"mean": …}`, several → a mean
/// per key (a key a trial lacks counts 0).
fn mean(rewards: &[&BTreeMap<String, f64>]) -> BTreeMap<String, f64> {
    let mut keys: Vec<&String> = rewards.iter().flat_map(|r| r.keys()).collect();
    keys.sort();
    keys.dedup();
    let n = rewards.len().max(1) as f64;
    if keys.len() <= 1 {
        let sum: f64 = rewards
            .iter()
            .map(|r| r.values().next().copied().unwrap_or(0.0))
            .sum();
        return BTreeMap::from([("mean".to_string(), sum / n)]);
    }
    keys.into_iter()
        .map(|k| {
            let sum: f64 = rewards
                .iter()
                .map(|r| r.get(k).copied().unwrap_or(0.0))
                .sum();
            (k.clone(), sum / n)
        })
        .collect()
}

/// Harbor's pass@k of one eval: only when every valid reward is a single 0 or 1; k = 2, 4, 8…
/// and 5, 10, 15… up to the fewest trials any task has.
pub(crate) fn pass_at_k(trials: &[&TrialResult]) -> BTreeMap<u32, f64> {
    let mut per_task: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for r in trials {
        let Some(rewards) = valid_rewards(r) else {
            continue;
        };
        if rewards.len() != 1 {
            return BTreeMap::new();
        }
        let v = *rewards.values().next().expect("one");
        if v != 0.0 && v != 1.0 {
            return BTreeMap::new();
        }
        per_task
            .entry(r.task_name.as_str())
            .or_default()
            .push(v as u32);
    }
    let Some(min) = per_task.values().map(Vec::len).min() else {
        return BTreeMap::new();
    };
    let mut ks: Vec<u32> = Vec::new();
    let mut k = 2;
    while k as usize <= min {
        ks.push(k);
        k *= 2;
    }
    let mut k = 5;
    while k as usize <= min {
        ks.push(k);
        k += 5;
    }
    ks.sort_unstable();
    ks.dedup();
    ks.into_iter()
        .map(|k| {
            let total: f64 = per_task
                .values()
                .map(|s| pass_at_k_one(s.len() as u32, s.iter().sum(), k))
                .sum();
            (k, total / per_task.len() as f64)
        })
        .collect()
}

fn pass_at_k_one(n: u32, c: u32, k: u32) -> f64 {
    if n - c < k {
        return 1.0;
    }
    let mut product = 1.0;
    for i in 0..k {
        product *= f64::from(n - c - i) / f64::from(n - i);
    }
    1.0 - product
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_at_k_matches_the_unbiased_estimator() {
        assert_eq!(pass_at_k_one(5, 0, 2), 0.0);
        assert_eq!(pass_at_k_one(5, 5, 2), 1.0);
        // 1 − C(3,2)/C(5,2) = 1 − 3/10
        assert!((pass_at_k_one(5, 2, 2) - 0.7).abs() < 1e-12);
        assert_eq!(pass_at_k_one(5, 1, 5), 1.0);
    }

    #[test]
    fn float_keys_read_as_python_writes_them() {
        assert_eq!(float_key(1.0), "1.0");
        assert_eq!(float_key(0.0), "0.0");
        assert_eq!(float_key(0.25), "0.25");
    }

    #[test]
    fn mean_of_one_key_is_named_mean() {
        let a = BTreeMap::from([("reward".to_string(), 1.0)]);
        let b = BTreeMap::from([("reward".to_string(), 0.0)]);
        assert_eq!(mean(&[&a, &b]), BTreeMap::from([("mean".to_string(), 0.5)]));
        let c = BTreeMap::from([("x".to_string(), 1.0)]);
        assert_eq!(
            mean(&[&a, &c]),
            BTreeMap::from([("reward".to_string(), 0.5), ("x".to_string(), 0.5)])
        );
    }
}
