use std::collections::BTreeMap;

/// Named numbers the verifier wrote.
pub type Reward = BTreeMap<String, f64>;

/// Why a reward file could not be read. Any of these makes `verifier.status = "error"`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RewardError {
    #[error("the verifier wrote no reward.json or reward.txt")]
    Missing,
    #[error("reward.json: {0}")]
    Json(String),
    #[error("reward.txt: {0}")]
    Text(String),
}

/// Parse the reward from `reward.json` (a flat object of finite numbers) or else `reward.txt`
/// (one finite number, key `reward`). `reward.json` wins when both exist.
pub fn parse_reward(json: Option<&[u8]>, txt: Option<&[u8]>) -> Result<Reward, RewardError> {
    if let Some(bytes) = json {
        let value: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| RewardError::Json(format!("not valid JSON: {e}")))?;
        let object = value
            .as_object()
            .ok_or_else(|| RewardError::Json("not a JSON object".into()))?;
        if object.is_empty() {
            return Err(RewardError::Json("empty object".into()));
        }
        let mut reward = Reward::new();
        for (key, value) in object {
            let number = value
                .as_f64()
                .filter(|n| n.is_finite())
                .ok_or_else(|| RewardError::Json(format!("{key}: not a finite number")))?;
            reward.insert(key.clone(), number);
        }
        return Ok(reward);
    }
    if let Some(bytes) = txt {
        let text = std::str::from_utf8(bytes)
            .map_err(|_| RewardError::Text("not UTF-8".into()))?
            .trim();
        let number: f64 = text
            .parse()
            .map_err(|_| RewardError::Text(format!("not a number: {:?}", clip(text))))?;
        if !number.is_finite() {
            return Err(RewardError::Text(format!("not a finite number: {text}")));
        }
        return Ok(Reward::from([("reward".to_string(), number)]));
    }
    Err(RewardError::Missing)
}

/// The value compared with the pass threshold: the `reward` key, else the mean of all values.
pub fn primary_value(reward: &Reward) -> f64 {
    match reward.get("reward") {
        Some(v) => *v,
        None => reward.values().sum::<f64>() / reward.len().max(1) as f64,
    }
}

fn clip(s: &str) -> String {
    s.chars().take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn txt_and_json() {
        assert_eq!(
            parse_reward(None, Some(b" 1\n")),
            Ok(Reward::from([("reward".into(), 1.0)]))
        );
        let r = parse_reward(Some(br#"{"a": 1, "b": 0.5}"#), Some(b"0")).expect("json wins");
        assert_eq!(primary_value(&r), 0.75);
        let r = parse_reward(Some(br#"{"reward": 0.2, "b": 1}"#), None).expect("json");
        assert_eq!(primary_value(&r), 0.2);
    }

    #[test]
    fn garbage_is_an_error_not_a_zero() {
        assert_eq!(parse_reward(None, None), Err(RewardError::Missing));
        assert!(matches!(
            parse_reward(None, Some(b"")),
            Err(RewardError::Text(_))
        ));
        assert!(matches!(
            parse_reward(None, Some(b"yes")),
            Err(RewardError::Text(_))
        ));
        assert!(matches!(
            parse_reward(None, Some(b"NaN")),
            Err(RewardError::Text(_))
        ));
        assert!(matches!(
            parse_reward(Some(b"[1]"), None),
            Err(RewardError::Json(_))
        ));
        assert!(matches!(
            parse_reward(Some(br#"{"a":"1"}"#), None),
            Err(RewardError::Json(_))
        ));
        assert!(matches!(
            parse_reward(Some(b"{}"), None),
            Err(RewardError::Json(_))
        ));
    }
}
