//! A scripted MCP host for integration tests: it starts the real `agent-as-model` binary over
//! stdio, connects on the legacy era (initialize) or on 2026-07-28 (discover + per-request
//! `_meta`), declares the sampling capabilities a test asks for, records every sampling request
//! it receives and answers each with a script.

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig,
    CreateMessageRequestParams, CreateMessageResult, ErrorData, Implementation, ProtocolVersion,
    SamplingMessage,
};
use rmcp::service::{RequestContext, RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, ServiceError, ServiceExt};
use serde_json::{Value, json};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// `initialize` handshake, protocol 2025-11-25: the server sends sampling requests.
    Legacy,
    /// 2026-07-28: per-request `_meta`, MRTR rounds.
    Modern,
}

pub const ERAS: [Era; 2] = [Era::Legacy, Era::Modern];

pub type Answer = Result<CreateMessageResult, ErrorData>;
type Script = Arc<
    dyn Fn(CreateMessageRequestParams) -> Pin<Box<dyn Future<Output = Answer> + Send>>
        + Send
        + Sync,
>;

#[derive(Clone)]
pub struct Host {
    pub sampling: bool,
    pub sampling_tools: bool,
    script: Script,
    seen: Arc<Mutex<Vec<CreateMessageRequestParams>>>,
}

impl Host {
    /// A host that declares `sampling` (and `sampling.tools` when `tools`) and answers with
    /// `answer(params)`.
    pub fn new<F>(tools: bool, answer: F) -> Self
    where
        F: Fn(&CreateMessageRequestParams) -> Answer + Send + Sync + 'static,
    {
        let answer = Arc::new(answer);
        Host {
            sampling: true,
            sampling_tools: tools,
            script: Arc::new(move |p| {
                let answer = answer.clone();
                Box::pin(async move { answer(&p) })
            }),
            seen: Arc::default(),
        }
    }

    /// A host whose answers take time (for concurrency and timeout tests).
    pub fn slow<F>(tools: bool, answer: F) -> Self
    where
        F: Fn(CreateMessageRequestParams) -> Pin<Box<dyn Future<Output = Answer> + Send>>
            + Send
            + Sync
            + 'static,
    {
        Host {
            sampling: true,
            sampling_tools: tools,
            script: Arc::new(answer),
            seen: Arc::default(),
        }
    }

    /// Answers every request with `text`, from model `host-model`.
    pub fn text(text: &str) -> Self {
        let text = text.to_owned();
        Host::new(false, move |_| Ok(reply(&text)))
    }

    /// Answers with "echo: " + the text of the last message.
    pub fn echo() -> Self {
        Host::new(false, |p| Ok(reply(&format!("echo: {}", last_text(p)))))
    }

    pub fn without_sampling(mut self) -> Self {
        self.sampling = false;
        self.sampling_tools = false;
        self
    }

    pub fn with_tools(mut self) -> Self {
        self.sampling_tools = true;
        self
    }

    /// Every sampling request received so far.
    pub fn seen(&self) -> Vec<CreateMessageRequestParams> {
        self.seen.lock().unwrap().clone()
    }

    /// Every sampling request received so far, as JSON.
    pub fn seen_json(&self) -> Vec<Value> {
        self.seen()
            .iter()
            .map(|p| serde_json::to_value(p).unwrap())
            .collect()
    }
}

pub fn reply(text: &str) -> CreateMessageResult {
    CreateMessageResult::new(SamplingMessage::assistant_text(text), "host-model".into())
        .with_stop_reason(CreateMessageResult::STOP_REASON_END_TURN)
}

/// The text of the last message of a sampling request.
pub fn last_text(p: &CreateMessageRequestParams) -> String {
    p.messages
        .last()
        .and_then(|m| m.content.first())
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

impl ClientHandler for Host {
    fn get_info(&self) -> ClientConfig {
        let caps: ClientCapabilities = match (self.sampling, self.sampling_tools) {
            (true, true) => ClientCapabilities::builder()
                .enable_sampling()
                .enable_sampling_tools()
                .build(),
            (true, false) => ClientCapabilities::builder().enable_sampling().build(),
            _ => ClientCapabilities::default(),
        };
        ClientConfig::new(caps, Implementation::new("scripted-host", "1.0.0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _ctx: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.seen.lock().unwrap().push(params.clone());
        (self.script)(params).await
    }
}

pub type Client = RunningService<RoleClient, Host>;

pub async fn connect(host: Host, era: Era) -> Client {
    connect_with_env(host, era, &[]).await
}

/// Starts the server binary with extra environment variables and connects `host` to it.
pub async fn connect_with_env(host: Host, era: Era, env: &[(&str, &str)]) -> Client {
    let cmd = server::Server::new()
        .log_level("error")
        .envs(env)
        .tokio_command();
    connect_command(host, era, cmd).await
}

/// Starts the server with `cmd` (the binary, or a launcher that starts it) and connects `host`.
pub async fn connect_command(host: Host, era: Era, cmd: tokio::process::Command) -> Client {
    let transport = TokioChildProcess::new(cmd).expect("spawn agent-as-model");
    let client = match era {
        Era::Legacy => host.serve(transport).await.expect("initialize"),
        Era::Modern => host
            .serve_with_lifecycle(
                transport,
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                },
            )
            .await
            .expect("discover"),
    };
    let version = client.peer_info().map(|i| i.protocol_version.to_string());
    let want = match era {
        Era::Legacy => "2025-11-25",
        Era::Modern => "2026-07-28",
    };
    assert_eq!(version.as_deref(), Some(want), "negotiated era");
    client
}

pub fn params(tool: &str, args: Value) -> CallToolRequestParams {
    let p = CallToolRequestParams::new(tool.to_owned());
    match args {
        Value::Object(o) => p.with_arguments(o),
        _ => p,
    }
}

/// Calls a tool, driving MRTR rounds on 2026-07-28; a JSON-RPC error is returned as `Err`.
pub async fn try_call(
    client: &Client,
    tool: &str,
    args: Value,
) -> Result<CallToolResult, ServiceError> {
    let result = tokio::time::timeout(
        Duration::from_secs(60),
        client.call_tool(params(tool, args)),
    )
    .await
    .expect("the call was answered within 60 s")?;
    validate_output(client, tool, &result).await;
    Ok(result)
}

/// Checks a result as the official SDKs do before handing it to their caller: when the tool
/// declares an `outputSchema`, a successful result must carry `structuredContent` and it must
/// validate. Every call the harness makes goes through this, on every backend and both eras.
pub async fn validate_output(client: &rmcp::Peer<RoleClient>, tool: &str, result: &CallToolResult) {
    if is_error(result) {
        return;
    }
    let tools = client.list_all_tools().await.expect("tools/list");
    let Some(schema) = tools
        .iter()
        .find(|t| t.name == tool)
        .and_then(|t| t.output_schema.as_ref())
    else {
        return;
    };
    let schema = Value::Object(schema.as_ref().clone());
    let instance = result.structured_content.clone().unwrap_or_else(|| {
        panic!("{tool} declares an outputSchema but returned no structuredContent")
    });
    let validator = jsonschema::validator_for(&schema).expect("the outputSchema compiles");
    let errors: Vec<String> = validator
        .iter_errors(&instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "Invalid structured content returned by tool {tool}: {instance} violates its \
         outputSchema: {errors:?}"
    );
}

/// Calls a tool and expects a result (successful or `isError`).
pub async fn call(client: &Client, tool: &str, args: Value) -> CallToolResult {
    try_call(client, tool, args)
        .await
        .expect("a tool result, not a JSON-RPC error")
}

pub fn text(r: &CallToolResult) -> String {
    r.content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

pub fn is_error(r: &CallToolResult) -> bool {
    r.is_error == Some(true)
}

pub fn structured(r: &CallToolResult) -> Value {
    r.structured_content.clone().unwrap_or(Value::Null)
}

/// A successful call's text; panics with the error text otherwise.
pub async fn ok_text(client: &Client, tool: &str, args: Value) -> String {
    let r = call(client, tool, args).await;
    assert!(!is_error(&r), "expected success, got error: {}", text(&r));
    text(&r)
}

/// A failed call's error text; panics if the call succeeded.
pub async fn err_text(client: &Client, tool: &str, args: Value) -> String {
    let r = call(client, tool, args).await;
    assert!(
        is_error(&r),
        "expected an isError result, got: {}",
        text(&r)
    );
    text(&r)
}

/// The JSON-RPC error code of a call that must fail at the protocol level.
pub fn rpc_code(e: &ServiceError) -> i32 {
    match e {
        ServiceError::McpError(d) => d.code.0,
        other => panic!("expected a JSON-RPC error, got {other}"),
    }
}

pub fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

/// Asserts that a result's structuredContent satisfies the outputSchema the tool declares, as
/// hosts check it.
pub async fn assert_conforms(client: &Client, tool: &str, result: &CallToolResult) {
    let tools = client.list_all_tools().await.unwrap();
    let def = tools.iter().find(|t| t.name == tool).expect("tool listed");
    let schema = Value::Object(
        def.output_schema
            .as_ref()
            .expect("outputSchema")
            .as_ref()
            .clone(),
    );
    let validator = jsonschema::validator_for(&schema).unwrap();
    let instance = structured(result);
    let errors: Vec<String> = validator
        .iter_errors(&instance)
        .map(|e| e.to_string())
        .collect();
    assert!(
        errors.is_empty(),
        "{tool} structuredContent {instance} violates its outputSchema: {errors:?}"
    );
}
pub mod openai;
pub mod raw;
pub mod requests;
pub mod server;
pub mod tier;

/// A child process killed (and reaped) when the test drops it, even on a failed assertion.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `future`'s output, which must come before the test's deadline `bound`, else the test fails
/// naming `what`. Tests assert the order of events, not how long something took: an answer that
/// must be prompt is one that comes before the client's deadline (a bound on a wait).
pub async fn before<T>(bound: Duration, what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(bound, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: not before the test's deadline of {bound:?}"))
}

/// `f`'s result, run on a thread of its own, which must come before the test's deadline `bound`
/// (as [`before`], for blocking work); a panic in `f` is the test's.
pub fn before_blocking<T: Send + 'static>(
    bound: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(bound) {
        Ok(value) => value,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: not before the test's deadline of {bound:?}")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => panic!("{what}: ended without a result"),
        },
    }
}

/// The path of a real peer a test starts: `var` when set and not empty, else `default`.
pub fn peer(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_owned())
}

/// An executable in the test peers' virtual environment (`scripts/test` makes it).
pub fn venv_bin(name: &str) -> String {
    format!(
        "{}/target/peers/venv/bin/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The Python the model-API SDK clients (`tests/e2e/api/*.py`) run on: `AGENT_AS_MODEL_SDK_PYTHON`
/// (a virtual environment with other versions of the SDKs: `scripts/client-matrix` sets it to
/// the newest ones), else `AGENT_AS_MODEL_PYTHON`, else the test peers' virtual environment.
pub fn sdk_python() -> String {
    peer(
        "AGENT_AS_MODEL_SDK_PYTHON",
        &peer("AGENT_AS_MODEL_PYTHON", &venv_bin("python")),
    )
}

/// An HTTP client for the tests (the TLS provider installed first, as the binary does).
pub fn http_client() -> reqwest::Client {
    agent_as_model::install_tls();
    reqwest::Client::new()
}

/// The text of `url`'s `/metrics` (a server started without a token).
pub async fn metrics_text(url: &str) -> String {
    http_client()
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// A loopback port nobody listens on right now (the benchmarks' helper).
#[path = "../../../benches/common/port.rs"]
mod port;
pub use port::free_port;

/// A small deterministic generator, so a failing case can be replayed from its seed.
pub struct Lcg(pub u64);
impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() as usize) % items.len()]
    }
}

/// The seed of a fuzz test: `AGENT_AS_MODEL_FUZZ_SEED` replays one, else `default`.
pub fn fuzz_seed(default: u64) -> u64 {
    std::env::var("AGENT_AS_MODEL_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The bridge in front of the official Python SDK's test downstream
/// (`tests/interop/progress_downstream.py`), on the legacy era (its sampling travels during the
/// call), as a host would start it.
pub fn bridge_to_sdk_downstream() -> tokio::process::Command {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/progress_downstream.py"
    );
    let python = peer("AGENT_AS_MODEL_PYTHON", &venv_bin("python"));
    server::Server::new()
        .args([
            "bridge",
            "--downstream-era",
            "legacy",
            "--",
            &python,
            script,
        ])
        .tokio_command()
}

/// The completion tools.
pub const SHAPES: [&str; 5] = [
    "chat_complete",
    "messages_create",
    "responses_create",
    "generate",
    "generate_content",
];

/// One question in `tool`'s own shape, for `model` (none: the argument is left out).
pub fn question(tool: &str, model: Option<&str>) -> Value {
    let q = "What is the capital of France? Answer in one word.";
    let mut args = match tool {
        "generate" => json!({"prompt": q, "max_tokens": 16}),
        "responses_create" => json!({"input": q, "max_output_tokens": 16}),
        "generate_content" => json!({"contents": [{"role": "user", "parts": [{"text": q}]}],
                                     "generationConfig": {"maxOutputTokens": 16}}),
        _ => json!({"messages": [{"role": "user", "content": q}], "max_tokens": 16}),
    };
    if let (Some(model), Some(o)) = (model, args.as_object_mut()) {
        o.insert("model".into(), json!(model));
    }
    args
}

/// A process's resident memory, in KiB (Linux).
pub fn resident_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Asks a server's `/healthz` every 100 ms, each answer due within 1 s, until stopped.
pub struct HealthWatch {
    done: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<usize>,
}

impl HealthWatch {
    pub fn start(server: &str) -> Self {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let healthz = format!("{server}/healthz");
        let task = {
            let done = done.clone();
            tokio::spawn(async move {
                let mut answered = 0;
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    let started = std::time::Instant::now();
                    let r = tokio::time::timeout(
                        Duration::from_secs(1),
                        http_client().get(&healthz).send(),
                    )
                    .await;
                    assert!(
                        matches!(&r, Ok(Ok(r)) if r.status() == 200),
                        "/healthz did not answer within 1 s (after {:?}; {answered} answered before)",
                        started.elapsed()
                    );
                    answered += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                answered
            })
        };
        HealthWatch { done, task }
    }

    /// Stops the watch: how many times `/healthz` answered (it panics if one was late).
    pub async fn stop(self) -> usize {
        self.done.store(true, std::sync::atomic::Ordering::SeqCst);
        let answered = self
            .task
            .await
            .expect("/healthz answered within 1 s throughout");
        assert!(answered > 0, "/healthz was asked");
        answered
    }
}
