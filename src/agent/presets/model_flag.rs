//! `arbiter run --model PROVIDER/NAME` (SPEC §10, §12): the model of every preset agent the
//! run starts, with the provider implied from the environment when the job file has no
//! `models:` entry of that name — `anthropic` from `ANTHROPIC_API_KEY`, `openai` from
//! `OPENAI_API_KEY` — so `arbiter run tasks/*/ --agent claude-code --model
//! anthropic/claude-sonnet-4-5` works with only the key set.
//!
//! Called by `job::resolve` before the config is validated ([`apply_model_flag`]): the
//! implied provider is added to `models:`, every preset agent defined in the config gets the
//! model (the flag overrides its `model:`), and an `--agent` naming a preset kind that the
//! config does not define becomes that preset with its defaults.

use crate::agent::{Agent, AgentKind, PresetAgent, PresetKind};
use crate::gateway::{AgentModel, ModelConfig};

/// Providers `--model` implies, with the variable that holds their key.
pub const IMPLIED_PROVIDERS: [(&str, &str); 2] = [
    ("anthropic", "ANTHROPIC_API_KEY"),
    ("openai", "OPENAI_API_KEY"),
];

/// What `--model` resolved to.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelFlag {
    pub model: AgentModel,
    /// The provider to add to `models:` (none when the job file defines it).
    pub implied: Option<ModelConfig>,
}

/// Parse `PROVIDER/NAME` against the job's `models:`; `env` reads arbiter's environment.
/// Errors are one line (the caller names the flag and its value).
pub fn parse_model_flag(
    spec: &str,
    models: &[ModelConfig],
    env: impl Fn(&str) -> Option<String>,
) -> Result<ModelFlag, String> {
    let Some((provider, name)) = spec
        .split_once('/')
        .filter(|(p, n)| !p.is_empty() && !n.is_empty())
    else {
        return Err("expected PROVIDER/NAME (e.g. anthropic/claude-sonnet-4-5)".to_string());
    };
    let model = AgentModel {
        provider: provider.to_string(),
        name: name.to_string(),
    };
    if models.iter().any(|m| m.name == provider) {
        return Ok(ModelFlag {
            model,
            implied: None,
        });
    }
    let Some((_, var)) = IMPLIED_PROVIDERS.iter().find(|(p, _)| *p == provider) else {
        return Err(format!(
            "unknown provider {provider:?} (implied from the environment: anthropic, openai; or define it under models: in the job file)"
        ));
    };
    if env(var).is_none_or(|v| v.is_empty()) {
        return Err(format!(
            "{var} is not set in arbiter's environment (the {provider} provider is implied from it; or define it under models: in the job file)"
        ));
    }
    let implied: ModelConfig = serde_yaml::from_str(&format!(
        "{{name: {provider}, api: {provider}, api_key: '${{{var}}}'}}"
    ))
    .map_err(|e| e.to_string())?;
    Ok(ModelFlag {
        model,
        implied: Some(implied),
    })
}

impl Agent {
    /// The preset called by its kind name (`claude-code`, …) with its defaults, for
    /// `--agent claude-code` without a definition in the job file.
    pub fn preset_named(name: &str, model: Option<AgentModel>) -> Option<Agent> {
        let kind = PresetKind::from_name(name)?;
        let config = PresetAgent {
            model,
            ..PresetAgent::default()
        };
        Some(Agent {
            name: name.to_string(),
            network: None,
            allowed_hosts: Vec::new(),
            continuation: None,
            kind: match kind {
                PresetKind::ClaudeCode => AgentKind::ClaudeCode(config),
                PresetKind::Codex => AgentKind::Codex(config),
                PresetKind::MiniSweAgent => AgentKind::MiniSweAgent(config),
                PresetKind::Aider => AgentKind::Aider(config),
            },
        })
    }

    /// Set the model of a preset agent (other kinds are left alone).
    pub fn set_preset_model(&mut self, model: &AgentModel) {
        if let AgentKind::ClaudeCode(c)
        | AgentKind::Codex(c)
        | AgentKind::MiniSweAgent(c)
        | AgentKind::Aider(c) = &mut self.kind
        {
            c.model = Some(model.clone());
        }
    }
}

/// Apply `--model` to a job: `defined` are the config's agent definitions, `wanted` the
/// `--agent` names. Returns the provider to add to `models:` and the agent definitions to
/// add (presets named by `--agent` that the config does not define).
pub fn apply_model_flag(flag: &ModelFlag, defined: &mut [Agent], wanted: &[String]) -> Vec<Agent> {
    for agent in defined.iter_mut() {
        agent.set_preset_model(&flag.model);
    }
    wanted
        .iter()
        .filter(|name| !defined.iter().any(|a| &a.name == *name))
        .filter_map(|name| Agent::preset_named(name, Some(flag.model.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_with(var: &'static str) -> impl Fn(&str) -> Option<String> {
        move |k| (k == var).then(|| "sk-test".to_string())
    }

    #[test]
    fn the_provider_is_implied_from_the_key_in_the_environment() {
        let flag = parse_model_flag(
            "anthropic/claude-sonnet-4-5",
            &[],
            env_with("ANTHROPIC_API_KEY"),
        )
        .expect("resolves");
        assert_eq!(flag.model.provider, "anthropic");
        assert_eq!(flag.model.name, "claude-sonnet-4-5");
        let implied = flag.implied.expect("implied provider");
        assert_eq!(implied.name, "anthropic");
        assert!(
            serde_yaml::to_string(&implied)
                .expect("yaml")
                .contains("${ANTHROPIC_API_KEY}")
        );
        // The key stays a reference: resolving it reads the environment later.
        let flag = parse_model_flag("openai/gpt-5", &[], env_with("OPENAI_API_KEY")).expect("ok");
        assert_eq!(flag.implied.expect("implied").name, "openai");
        // A model name with a slash keeps everything after the provider.
        let flag =
            parse_model_flag("openai/org/model", &[], env_with("OPENAI_API_KEY")).expect("ok");
        assert_eq!(flag.model.name, "org/model");
    }

    #[test]
    fn a_provider_of_the_job_file_wins_and_needs_no_key() {
        let models: Vec<ModelConfig> =
            serde_yaml::from_str("- {name: anthropic, api: scripted, script: s.json}\n")
                .expect("models");
        let flag =
            parse_model_flag("anthropic/claude-sonnet-4-5", &models, |_| None).expect("resolves");
        assert_eq!(flag.implied, None);
    }

    #[test]
    fn refusals_are_one_line() {
        let no_key = parse_model_flag("anthropic/claude-sonnet-4-5", &[], |_| None).unwrap_err();
        assert_eq!(
            no_key,
            "ANTHROPIC_API_KEY is not set in arbiter's environment (the anthropic provider is implied from it; or define it under models: in the job file)"
        );
        // The other provider's key does not count.
        assert!(parse_model_flag("anthropic/x", &[], env_with("OPENAI_API_KEY")).is_err());
        assert!(
            parse_model_flag("gemini/x", &[], env_with("GEMINI_API_KEY"))
                .unwrap_err()
                .contains("unknown provider \"gemini\"")
        );
        for bad in ["claude", "/x", "anthropic/"] {
            let e = parse_model_flag(bad, &[], env_with("ANTHROPIC_API_KEY")).unwrap_err();
            assert!(e.contains("expected PROVIDER/NAME"), "{bad}: {e}");
            assert!(!e.contains('\n'));
        }
    }

    #[test]
    fn presets_named_by_agent_are_created_and_defined_ones_get_the_model() {
        let flag = ModelFlag {
            model: AgentModel {
                provider: "anthropic".into(),
                name: "claude-sonnet-4-5".into(),
            },
            implied: None,
        };
        let mut defined: Vec<Agent> = vec![
            serde_yaml::from_str("name: mine\nkind: codex\nmodel: {provider: x, name: y}\n")
                .expect("agent"),
            Agent::builtin("oracle").expect("oracle"),
        ];
        let wanted = ["claude-code", "mine", "oracle", "nope"].map(String::from);
        let added = apply_model_flag(&flag, &mut defined, &wanted);
        assert_eq!(added.len(), 1);
        assert_eq!(added[0].name, "claude-code");
        assert_eq!(
            added[0].kind.preset().map(|(k, _)| k),
            Some(PresetKind::ClaudeCode)
        );
        assert_eq!(added[0].kind.model().map(|(m, _)| m), Some(&flag.model));
        // The flag overrides a defined preset's model; other kinds have none.
        assert_eq!(defined[0].kind.model().map(|(m, _)| m), Some(&flag.model));
        assert!(defined[1].kind.model().is_none());
    }

    #[test]
    fn a_job_resolves_with_the_flag_and_a_preset_named_by_agent() {
        let cache = crate::agent::cache::AgentCache::from_env().expect("cache");
        let kind = PresetKind::ClaudeCode;
        if cache.lookup(kind.name(), kind.pinned_version()).is_err() {
            eprintln!("skipped: claude-code is not in the agent cache (scripts/agents)");
            return;
        }
        let tmp = tempfile::tempdir().expect("tmp");
        std::fs::write(tmp.path().join("s.json"), r#"{"turns": []}"#).expect("script");
        // A provider of the job file named like the implied one: no key is needed.
        std::fs::write(
            tmp.path().join("job.yaml"),
            "models:\n  - {name: anthropic, api: scripted, script: s.json}\n",
        )
        .expect("job");
        let task = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tasks/exact-deliverable");
        let args = crate::job::RunArgs {
            tasks: vec![task.display().to_string()],
            config: Some(tmp.path().join("job.yaml")),
            agents: vec!["claude-code".into()],
            job_dir: Some(tmp.path().join("job")),
            model: Some("anthropic/claude-sonnet-4-5".into()),
            ..crate::job::RunArgs::default()
        };
        let spec = crate::job::resolve(&args).expect("resolves");
        assert_eq!(spec.agents.len(), 1);
        let agent = &spec.agents[0];
        assert_eq!(agent.name, "claude-code");
        let (model, _) = agent.kind.model().expect("model");
        assert_eq!(model.provider, "anthropic");
        assert_eq!(model.name, "claude-sonnet-4-5");
        assert_eq!(spec.models.len(), 1);
        // Without the flag, the same --agent is not an agent of this job.
        let without = crate::job::RunArgs {
            model: None,
            ..args
        };
        let err = crate::job::resolve(&without)
            .expect_err("unknown agent")
            .to_string();
        assert!(err.contains("--agent:claude-code: unknown agent"), "{err}");
    }
}
