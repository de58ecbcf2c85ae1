//! `GET /metrics`: the Prometheus exposition behind the server's token, read by Prometheus's own
//! Python parser (`prometheus_client`), its counters moving by exactly the calls made: requests
//! by API, model and outcome, tokens as the answers reported them, a provider's retry after a
//! 503, a fallback, the histograms' counts; and the embedded model's queue, slots, memory and
//! cache as they are while it answers, under this server's names and vLLM's (the model server
//! protocol an inference gateway reads).

use crate::common::http_client;
use crate::common::openai::{Reply, Scripted, completion};
use crate::http::start;
use crate::http_api::{TOKEN, data, embedded, post, text_chunk};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// One sample as the parser read it.
#[derive(Debug, Clone)]
struct Sample {
    family: String,
    kind: String,
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A scrape, parsed.
#[derive(Debug)]
struct Scrape {
    text: String,
    samples: Vec<Sample>,
}

impl Scrape {
    /// The value of the sample `name` with exactly `labels` (0 when there is none).
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let wanted: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let found: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| s.name == name && s.labels == wanted)
            .map(|s| s.value)
            .collect();
        assert!(found.len() <= 1, "{name} {labels:?} twice: {}", self.text);
        found.first().copied().unwrap_or(0.0)
    }

    /// Every sample of `name`, whatever its labels, added up.
    fn total(&self, name: &str) -> f64 {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.value)
            .sum()
    }

    /// The type the exposition gives the family `family`.
    fn kind(&self, family: &str) -> Option<&str> {
        self.samples
            .iter()
            .find(|s| s.family == family)
            .map(|s| s.kind.as_str())
    }
}

/// Reads an exposition with `prometheus_client.parser.text_string_to_metric_families`, run from
/// the test peers' virtual environment (`scripts/peers` installs it).
fn parse(text: &str) -> Scrape {
    use std::io::Write;
    const SCRIPT: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        out.append({"family": family.name, "type": family.type, "name": s.name,
                    "labels": s.labels, "value": s.value})
print(json.dumps(out))
"#;
    let mut child = std::process::Command::new(crate::common::venv_bin("python"))
        .args(["-c", SCRIPT])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the peers' Python (scripts/peers)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "prometheus_client refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    let parsed: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    let samples = parsed
        .iter()
        .map(|s| Sample {
            family: s["family"].as_str().unwrap().to_owned(),
            kind: s["type"].as_str().unwrap().to_owned(),
            name: s["name"].as_str().unwrap().to_owned(),
            labels: s["labels"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect(),
            value: s["value"].as_f64().unwrap(),
        })
        .collect();
    Scrape {
        text: text.to_owned(),
        samples,
    }
}

/// `GET /metrics` with `headers`: the status, the content type and the body.
async fn get_metrics(url: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
    let mut request = http_client().get(format!("{url}/metrics"));
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let kind = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, kind, response.text().await.unwrap())
}

/// A scrape as Prometheus makes it, with the token as its bearer credentials.
async fn scrape(url: &str) -> Scrape {
    let bearer = format!("Bearer {TOKEN}");
    let (status, kind, text) = get_metrics(url, &[("authorization", &bearer)]).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(kind, "text/plain; version=0.0.4; charset=utf-8");
    parse(&text)
}

/// A models file: `scripted` (retried once), and `flaky`, which falls back to it.
fn models_file(scripted: &Scripted, flaky: &Scripted) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("aam-metrics-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("models.toml");
    let text = format!(
        "default = \"scripted\"\n\
         [[models]]\nname = \"scripted\"\nbackend = \"provider\"\nurl = \"{}\"\n\
         model = \"upstream\"\nretries = 1\n\
         [[models]]\nname = \"flaky\"\nbackend = \"provider\"\nurl = \"{}\"\nmodel = \"down\"\n\
         retries = 0\nfallbacks = [\"scripted\"]\n",
        scripted.url, flaky.url
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// A chat-completion chunk with the stream's usage.
fn usage_chunk(prompt: u64, completion: u64) -> String {
    json!({"id": "c", "object": "chat.completion.chunk", "model": "upstream", "choices": [],
           "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                     "total_tokens": prompt + completion}})
    .to_string()
}

/// Tokens as a call's answer reported them: prompt (cached ones included), cached, generated.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Tokens {
    prompt: f64,
    cached: f64,
    generated: f64,
}

impl Tokens {
    /// OpenAI's usage (chat, text completions, an MCP tool's chat.completion).
    fn openai(usage: &Value) -> Tokens {
        Tokens {
            prompt: usage["prompt_tokens"].as_f64().unwrap(),
            cached: usage["prompt_tokens_details"]["cached_tokens"]
                .as_f64()
                .unwrap_or(0.0),
            generated: usage["completion_tokens"].as_f64().unwrap(),
        }
    }

    /// Anthropic's usage: its input tokens leave the cached ones out.
    fn anthropic(usage: &Value) -> Tokens {
        let cached = usage["cache_read_input_tokens"].as_f64().unwrap();
        Tokens {
            prompt: usage["input_tokens"].as_f64().unwrap() + cached,
            cached,
            generated: usage["output_tokens"].as_f64().unwrap(),
        }
    }

    fn add(self, other: Tokens) -> Tokens {
        Tokens {
            prompt: self.prompt + other.prompt,
            cached: self.cached + other.cached,
            generated: self.generated + other.generated,
        }
    }

    /// The token counters of `model` in a scrape.
    fn scraped(scrape: &Scrape, model: &str) -> Tokens {
        let by = [("model", model)];
        Tokens {
            prompt: scrape.value("agent_as_model_prompt_tokens_total", &by),
            cached: scrape.value("agent_as_model_cached_tokens_total", &by),
            generated: scrape.value("agent_as_model_generated_tokens_total", &by),
        }
    }
}

fn requests(scrape: &Scrape, api: &str, model: &str, outcome: &str) -> f64 {
    scrape.value(
        "agent_as_model_requests_total",
        &[("api", api), ("model", model), ("outcome", outcome)],
    )
}

fn durations(scrape: &Scrape, api: &str, model: &str) -> f64 {
    let labels = [("api", api), ("model", model)];
    let count = scrape.value("agent_as_model_request_duration_seconds_count", &labels);
    let inf = [("api", api), ("model", model), ("le", "+Inf")];
    assert_eq!(
        scrape.value("agent_as_model_request_duration_seconds_bucket", &inf),
        count,
        "{}",
        scrape.text
    );
    count
}

#[tokio::test]
async fn metrics_count_each_call_by_api_model_and_outcome_with_its_tokens_retries_and_fallbacks() {
    let cached = json!({"id": "chatcmpl-2", "object": "chat.completion", "model": "upstream",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "Paris."}}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23,
                  "prompt_tokens_details": {"cached_tokens": 5}}});
    let scripted = Scripted::start(vec![
        // The first call's first try is refused once, and retried.
        Reply::Answer(
            503,
            vec![("retry-after".into(), "0".into())],
            json!({"error": {"message": "overloaded"}}).to_string(),
        ),
        Reply::json(200, &completion("Paris.")),
        Reply::Events(
            vec![
                text_chunk("Par"),
                text_chunk("is."),
                usage_chunk(7, 2),
                "[DONE]".to_owned(),
            ],
            Duration::from_millis(20),
        ),
        Reply::json(200, &cached),
        Reply::json(200, &completion("Paris.")),
    ])
    .await;
    let flaky = Scripted::start(vec![Reply::json(
        500,
        &json!({"error": {"message": "down"}}),
    )])
    .await;
    let path = models_file(&scripted, &flaky);
    let s = start(&[
        ("AGENT_AS_MODEL_MODELS", path.to_str().unwrap()),
        ("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN),
    ])
    .await;

    // Behind the token, as the APIs are.
    let (status, _, _) = get_metrics(&s.url, &[]).await;
    assert_eq!(status, 401);
    let (status, _, _) = get_metrics(&s.url, &[("authorization", "Bearer wrong")]).await;
    assert_eq!(status, 401);

    let key = [("x-api-key", TOKEN)];
    let chat_url = format!("{}/v1/chat/completions", s.url);
    let question = json!([{"role": "user", "content": "Capital of France?"}]);
    let mut returned = Tokens::default();
    // A whole chat completion, answered after the provider's 503 and one retry.
    let body = json!({"model": "scripted", "messages": question});
    let (status, _, text) = post(&chat_url, &key, &body).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    returned = returned.add(Tokens::openai(&v["usage"]));
    // A streamed one, with its usage in the last chunk.
    let body = json!({"model": "scripted", "messages": question, "stream": true,
                      "stream_options": {"include_usage": true}});
    let (status, _, text) = post(&chat_url, &key, &body).await;
    assert_eq!(status, 200, "{text}");
    let chunks = data(&text);
    let usage = chunks
        .iter()
        .rev()
        .find(|c| c["usage"].is_object())
        .unwrap();
    returned = returned.add(Tokens::openai(&usage["usage"]));
    // An Anthropic message, some of whose prompt the provider had cached.
    let messages_url = format!("{}/v1/messages", s.url);
    let body = json!({"model": "scripted", "max_tokens": 20, "messages": question});
    let (status, _, text) = post(&messages_url, &key, &body).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    returned = returned.add(Tokens::anthropic(&v["usage"]));
    // A text completion for `flaky`, which fails and falls back to `scripted`.
    let body = json!({"model": "flaky", "prompt": "The capital of France is", "max_tokens": 8});
    let (status, _, text) = post(&format!("{}/v1/completions", s.url), &key, &body).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    returned = returned.add(Tokens::openai(&v["usage"]));
    // Two bad requests: a body that is no object, and a model this server does not have.
    let (status, _, _) = post(&chat_url, &key, &json!("hello")).await;
    assert_eq!(status, 400);
    let body = json!({"model": "made-up-model", "max_tokens": 20, "messages": question});
    let (status, _, _) = post(&messages_url, &key, &body).await;
    assert_eq!(status, 404);

    let first = scrape(&s.url).await;
    let f = &first;
    assert_eq!(
        f.kind("agent_as_model_requests"),
        Some("counter"),
        "{}",
        f.text
    );
    assert_eq!(
        f.kind("agent_as_model_request_duration_seconds"),
        Some("histogram")
    );
    assert_eq!(
        f.kind("agent_as_model_time_to_first_token_seconds"),
        Some("histogram")
    );
    assert_eq!(f.kind("agent_as_model_local_models_loaded"), Some("gauge"));
    assert_eq!(requests(f, "chat", "scripted", "ok"), 2.0, "{}", f.text);
    assert_eq!(requests(f, "messages", "scripted", "ok"), 1.0);
    assert_eq!(requests(f, "completions", "scripted", "ok"), 1.0);
    assert_eq!(requests(f, "chat", "unknown", "client_error"), 1.0);
    assert_eq!(requests(f, "messages", "unknown", "client_error"), 1.0);
    assert_eq!(f.total("agent_as_model_requests_total"), 6.0, "{}", f.text);
    // A model a client made up is never a label.
    assert!(!f.text.contains("made-up-model"), "{}", f.text);
    // Tokens exactly as the answers reported them.
    assert_eq!(Tokens::scraped(f, "scripted"), returned, "{}", f.text);
    assert_eq!(returned.cached, 5.0);
    // The provider's 503 was retried once; `flaky` was not retried, and fell back.
    let retries = "agent_as_model_provider_retries_total";
    assert_eq!(
        f.value(retries, &[("model", "scripted")]),
        1.0,
        "{}",
        f.text
    );
    assert_eq!(f.value(retries, &[("model", "flaky")]), 0.0);
    assert_eq!(scripted.seen().len(), 5, "one retry, one fallback");
    let fallbacks = [("from", "flaky"), ("to", "scripted")];
    assert_eq!(f.value("agent_as_model_fallbacks_total", &fallbacks), 1.0);
    // Every call's duration; the first piece of the one streamed.
    assert_eq!(durations(f, "chat", "scripted"), 2.0);
    assert_eq!(durations(f, "messages", "scripted"), 1.0);
    assert_eq!(durations(f, "completions", "scripted"), 1.0);
    assert_eq!(durations(f, "chat", "unknown"), 1.0);
    assert_eq!(durations(f, "messages", "unknown"), 1.0);
    let by = [("model", "scripted")];
    let first_token = "agent_as_model_time_to_first_token_seconds";
    assert_eq!(f.value(&format!("{first_token}_count"), &by), 1.0);
    let waited = f.value(&format!("{first_token}_sum"), &by);
    let chat_sum = f.value(
        "agent_as_model_request_duration_seconds_sum",
        &[("api", "chat"), ("model", "scripted")],
    );
    assert!(waited > 0.0 && waited < chat_sum, "{waited} {chat_sum}");
    // No embedded model here.
    assert_eq!(f.value("agent_as_model_local_models_loaded", &[]), 0.0);
    assert!(!f.text.contains("local_slots"), "{}", f.text);

    // More calls: a chat completion, and an MCP tool call over /mcp.
    let body = json!({"model": "scripted", "messages": question});
    let (status, _, text) = post(&chat_url, &key, &body).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    returned = returned.add(Tokens::openai(&v["usage"]));
    let bearer = format!("Bearer {TOKEN}");
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "_meta": crate::http::meta(), "name": "chat_complete",
        "arguments": {"model": "scripted", "messages": question}}});
    let headers = [
        ("authorization", bearer.as_str()),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "chat_complete"),
    ];
    let (status, replies, _) = crate::http::post(&s.url, &headers, &call).await;
    assert_eq!(status, 200);
    let reply = replies.iter().find(|m| m["id"] == 7).unwrap();
    let usage = &reply["result"]["structuredContent"]["chat_completion"]["usage"];
    assert!(usage.is_object(), "{reply}");
    returned = returned.add(Tokens::openai(usage));

    let second = scrape(&s.url).await;
    let g = &second;
    assert_eq!(requests(g, "chat", "scripted", "ok"), 3.0, "{}", g.text);
    assert_eq!(requests(g, "mcp", "scripted", "ok"), 1.0, "{}", g.text);
    assert_eq!(g.total("agent_as_model_requests_total"), 8.0);
    assert_eq!(Tokens::scraped(g, "scripted"), returned, "{}", g.text);
    assert_eq!(durations(g, "chat", "scripted"), 3.0);
    assert_eq!(durations(g, "mcp", "scripted"), 1.0);
    // No counter went back, and every one the first scrape had is still there.
    for sample in &first.samples {
        if sample.kind == "gauge" {
            continue;
        }
        let labels: Vec<(&str, &str)> = sample
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let now = second.value(&sample.name, &labels);
        assert!(
            now >= sample.value,
            "{} {labels:?}: {} then {now}",
            sample.name,
            sample.value
        );
    }
}

/// Polls the metrics until `done` says the scrape is as expected (at most 30 s).
async fn scrape_until(url: &str, what: &str, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = scrape(url).await;
        if done(&now) {
            return now;
        }
        assert!(Instant::now() < deadline, "never {what}: {}", now.text);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The model server protocol's gauges of the model `local`: calls waiting, calls running, and
/// the share of its cache in use.
fn protocol(m: &Scrape) -> (f64, f64, f64) {
    let by = [("model_name", "local")];
    (
        m.value("vllm:num_requests_waiting", &by),
        m.value("vllm:num_requests_running", &by),
        m.value("vllm:kv_cache_usage_perc", &by),
    )
}

#[tokio::test]
async fn the_embedded_models_queue_slots_and_memory_are_scraped_as_they_are() {
    let (_turn, s) = embedded(&[
        ("AGENT_AS_MODEL_AUTH_TOKEN", TOKEN),
        ("AGENT_AS_MODEL_LOCAL_SLOTS", "1"),
    ])
    .await;
    let url = format!("{}/v1/chat/completions", s.url);
    answered_then_idle(&s.url, &url).await;
    busy_then_waiting_then_cancelled(&s.url, &url).await;
}

/// One short answer, then the idle model as scraped: loaded, its weights' memory, its one slot
/// free, nothing queued, its cache's size, and the answer's tokens.
async fn answered_then_idle(base: &str, url: &str) {
    let short = json!({"model": "local", "max_tokens": 4,
                       "messages": [{"role": "user", "content": "Capital of France?"}]});
    let (status, _, text) = post(url, &[("x-api-key", TOKEN)], &short).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let returned = Tokens::openai(&v["usage"]);
    let by = [("model", "local")];
    let idle = scrape(base).await;
    assert_eq!(idle.value("agent_as_model_local_models_loaded", &[]), 1.0);
    let memory = idle.value("agent_as_model_local_model_memory_bytes", &by);
    let file = std::fs::metadata(
        dirs::cache_dir()
            .unwrap()
            .join("agent-as-model/models/qwen2.5-coder-0.5b-instruct.gguf"),
    )
    .map(|m| m.len() as f64)
    .ok();
    assert!(memory > 100e6, "{}", idle.text);
    if let Some(file) = file {
        assert!(memory <= file, "{memory} > {file}");
    }
    assert_eq!(idle.value("agent_as_model_local_slots", &by), 1.0);
    assert_eq!(idle.value("agent_as_model_local_slots_busy", &by), 0.0);
    assert_eq!(idle.value("agent_as_model_local_queue_depth", &by), 0.0);
    assert_eq!(Tokens::scraped(&idle, "local"), returned);
    assert_eq!(requests(&idle, "chat", "local", "ok"), 1.0);
    // The protocol's gauges: nothing waits or runs, and a finished call holds no cache.
    assert_eq!(protocol(&idle), (0.0, 0.0, 0.0), "{}", idle.text);
    let info: Vec<&Sample> = idle
        .samples
        .iter()
        .filter(|x| x.name == "vllm:cache_config_info")
        .collect();
    assert_eq!(info.len(), 1, "{}", idle.text);
    assert_eq!(info[0].value, 1.0);
    assert_eq!(info[0].labels["model_name"], "local");
    assert_eq!(info[0].labels["block_size"], "1");
    let cells: u64 = info[0].labels["num_gpu_blocks"].parse().unwrap();
    assert!(cells >= 512, "{}", idle.text);
    for family in [
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:cache_config_info",
    ] {
        assert_eq!(idle.kind(family), Some("gauge"), "{family}: {}", idle.text);
    }
}

/// A long answer holds the one slot and a second call waits behind it, both seen by this
/// server's gauges and the protocol's; then both callers go away and every gauge is back to
/// zero.
async fn busy_then_waiting_then_cancelled(base: &str, url: &str) {
    let by = [("model", "local")];
    // Greedy: a sampled answer may end in a few tokens (it did, now and then, under load),
    // before the second call is seen waiting; greedy, this one runs to its limit.
    let long = json!({"model": "local", "max_tokens": 2000, "stream": true, "temperature": 0,
                      "messages": [{"role": "user", "content": "Count from 1 to 1000, in words."}]});
    let mut holding = crate::http_api::open_stream(url, &long).await;
    assert_eq!(holding.status(), 200);
    let first = holding.chunk().await.unwrap();
    assert!(first.is_some());
    let busy = scrape_until(base, "a busy slot", |m| {
        m.value("agent_as_model_local_slots_busy", &by) == 1.0
    })
    .await;
    assert_eq!(busy.value("agent_as_model_local_queue_depth", &by), 0.0);
    let waiting = tokio::spawn({
        let url = url.to_owned();
        async move { crate::http_api::open_stream(&url, &long).await }
    });
    let queued = scrape_until(base, "one call waiting, one running", |m| {
        let (waiting, running, cache) = protocol(m);
        m.value("agent_as_model_local_queue_depth", &by) == 1.0
            && (waiting, running) == (1.0, 1.0)
            && cache > 0.0
    })
    .await;
    let (_, _, cache) = protocol(&queued);
    assert!(cache <= 1.0, "{}", queued.text);
    // Both callers go away: the queue and the slot are freed, and both calls are cancelled.
    waiting.abort();
    drop(holding);
    let after = scrape_until(base, "both calls cancelled and the slot free", |m| {
        m.value("agent_as_model_local_queue_depth", &by) == 0.0
            && m.value("agent_as_model_local_slots_busy", &by) == 0.0
            && requests(m, "chat", "local", "cancelled") == 2.0
            && protocol(m) == (0.0, 0.0, 0.0)
    })
    .await;
    let first_token = "agent_as_model_time_to_first_token_seconds_count";
    assert_eq!(after.value(first_token, &by), 1.0, "{}", after.text);
}
