//! The LLM behind ask: any OpenAI-compatible chat-completions endpoint.
//!
//! Its answer is asked for as a JSON object `{"sql", "rationale"}` and read leniently (a
//! fenced code block around it is accepted), because endpoints differ in how strictly they
//! honour `response_format`. What it fails with becomes one of the envelopes below, each
//! naming what to do; the API key never appears in a message or a log.

use std::time::Duration;

use serde_json::{json, Value};
use svc_core::{Error, ErrorKind};

/// Where the LLM is and how long to wait for it (`[llm]` in `svc.toml`, `SVC_LLM_*`).
#[derive(Clone, Default)]
pub struct LlmConfig {
    /// The API root, e.g. `http://127.0.0.1:8080/v1`; requests go to
    /// `<endpoint>/chat/completions`. Unset: ask answers `not_configured`.
    pub endpoint: Option<String>,
    /// The model name sent with each request.
    pub model: Option<String>,
    /// The bearer key, if the endpoint wants one.
    pub api_key: Option<String>,
    /// How long one LLM call may take.
    pub timeout: Duration,
}

impl std::fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmConfig")
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "***"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// The default time one LLM call may take.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// What the LLM proposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    /// The SQL, as proposed (checked later).
    pub sql: String,
    /// Why it answers the question.
    pub rationale: String,
}

/// A configured chat-completions client.
#[derive(Clone)]
pub struct Llm {
    http: reqwest::Client,
    url: String,
    model: String,
    api_key: Option<String>,
}

impl std::fmt::Debug for Llm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Llm")
            .field("url", &self.url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

fn not_configured() -> Error {
    Error::coded(
        ErrorKind::Unavailable,
        "not_configured",
        "Ask needs an LLM, and none is configured on this instance",
        json!({ "hint": "set endpoint and model under [llm] in svc.toml, or SVC_LLM_ENDPOINT and SVC_LLM_MODEL (an OpenAI-compatible chat-completions API)" }),
    )
}

fn llm_error(kind: ErrorKind, code: &'static str, message: impl Into<String>) -> Error {
    Error::coded(kind, code, message, json!({}))
}

impl Llm {
    /// A client for `config`, or the `not_configured` envelope when it names no endpoint or
    /// no model.
    pub fn new(config: &LlmConfig) -> Result<Self, Error> {
        let (Some(endpoint), Some(model)) = (
            config.endpoint.as_deref().filter(|e| !e.trim().is_empty()),
            config.model.as_deref().filter(|m| !m.trim().is_empty()),
        ) else {
            return Err(not_configured());
        };
        let http = reqwest::Client::builder()
            .timeout(if config.timeout.is_zero() {
                DEFAULT_TIMEOUT
            } else {
                config.timeout
            })
            .build()
            .map_err(Error::internal)?;
        Ok(Self {
            http,
            url: format!("{}/chat/completions", endpoint.trim_end_matches('/')),
            model: model.to_owned(),
            api_key: config.api_key.clone().filter(|k| !k.is_empty()),
        })
    }

    /// Asks for the SQL answering `question`, given the `schema` digest in the system prompt.
    pub async fn propose(&self, system: &str, question: &str) -> Result<Proposal, Error> {
        let body = json!({
            "model": self.model,
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": format!(
                    "Question: {question}\n\nAnswer with a JSON object {{\"sql\": \"...\", \"rationale\": \"...\"}}."
                )},
            ],
        });
        let mut request = self.http.post(&self.url).json(&body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|e| {
            if e.is_timeout() {
                llm_error(
                    ErrorKind::Unavailable,
                    "llm_timeout",
                    "The LLM did not answer in time; try again",
                )
            } else {
                llm_error(
                    ErrorKind::Upstream,
                    "llm_failed",
                    format!("The LLM could not be reached: {}", without_url(&e)),
                )
            }
        })?;
        let status = response.status().as_u16();
        match status {
            200..=299 => {}
            401 | 403 => {
                return Err(llm_error(
                    ErrorKind::Unavailable,
                    "llm_auth",
                    "The LLM endpoint refused the configured API key",
                ))
            }
            429 => {
                return Err(llm_error(
                    ErrorKind::Unavailable,
                    "llm_rate_limited",
                    "The LLM is rate-limiting this instance; try again in a moment",
                )
                .retry_after(5))
            }
            _ => {
                return Err(llm_error(
                    ErrorKind::Upstream,
                    "llm_failed",
                    format!("The LLM answered HTTP {status}"),
                ))
            }
        }
        let text = response.text().await.map_err(|e| {
            llm_error(
                ErrorKind::Unavailable,
                "llm_timeout",
                format!("Reading the LLM's answer failed: {}", without_url(&e)),
            )
        })?;
        parse_answer(&text)
    }
}

/// A transport error's text without the URL (which may carry credentials in user info).
fn without_url(e: &reqwest::Error) -> String {
    let mut e = e.to_string();
    if let Some(i) = e.find(" for url (") {
        e.truncate(i);
    }
    e
}

fn bad_output(why: &str) -> Error {
    llm_error(
        ErrorKind::Upstream,
        "llm_bad_output",
        format!("The LLM's answer was not the JSON asked for ({why}); try rephrasing"),
    )
}

/// The proposal inside a chat-completions response body.
fn parse_answer(body: &str) -> Result<Proposal, Error> {
    let doc: Value = serde_json::from_str(body).map_err(|_| bad_output("not JSON"))?;
    let choice = &doc["choices"][0];
    if choice["finish_reason"] == "length" {
        return Err(bad_output("cut at the token limit"));
    }
    if choice["message"]["refusal"].is_string() {
        return Err(llm_error(
            ErrorKind::BadRequest,
            "llm_refused",
            "The LLM refused the question",
        ));
    }
    let content = choice["message"]["content"]
        .as_str()
        .ok_or_else(|| bad_output("no message content"))?;
    let inner = content.trim();
    let inner = inner
        .strip_prefix("```json")
        .or_else(|| inner.strip_prefix("```"))
        .and_then(|s| s.strip_suffix("```"))
        .unwrap_or(inner)
        .trim();
    let answer: Value =
        serde_json::from_str(inner).map_err(|_| bad_output("the content is not a JSON object"))?;
    let field = |k: &str| answer[k].as_str().map(str::to_owned);
    match (field("sql"), field("rationale")) {
        (Some(sql), rationale) => Ok(Proposal {
            sql,
            rationale: rationale.unwrap_or_default(),
        }),
        (None, _) => Err(bad_output("no \"sql\" string")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(content: &str) -> String {
        json!({"choices": [{"message": {"content": content}, "finish_reason": "stop"}]}).to_string()
    }

    #[test]
    fn answers_are_read_plain_or_fenced_and_garbage_is_a_clear_error() {
        let plain = completion(r#"{"sql": "SELECT 1", "rationale": "one"}"#);
        assert_eq!(
            parse_answer(&plain).unwrap(),
            Proposal {
                sql: "SELECT 1".into(),
                rationale: "one".into()
            }
        );
        let fenced = completion("```json\n{\"sql\": \"SELECT 2\", \"rationale\": \"\"}\n```");
        assert_eq!(parse_answer(&fenced).unwrap().sql, "SELECT 2");
        for body in [
            "not json".to_owned(),
            completion("SELECT 1"),
            completion(r#"{"rationale": "no sql"}"#),
        ] {
            let e = parse_answer(&body).unwrap_err();
            assert_eq!(e.code(), Some("llm_bad_output"), "{body}");
            assert_eq!(e.status(), 502);
        }
    }

    #[test]
    fn missing_endpoint_or_model_is_not_configured_and_the_key_is_never_printed() {
        let mut config = LlmConfig {
            model: Some("m".into()),
            api_key: Some("sk-secret".into()),
            ..LlmConfig::default()
        };
        let e = Llm::new(&config).unwrap_err();
        assert_eq!((e.status(), e.code()), (503, Some("not_configured")));
        config.endpoint = Some("http://127.0.0.1:9/v1/".into());
        let llm = Llm::new(&config).unwrap();
        assert_eq!(llm.url, "http://127.0.0.1:9/v1/chat/completions");
        assert!(!format!("{config:?}").contains("sk-secret"));
    }
}
