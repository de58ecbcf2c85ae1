//! `agent-as-model try "…"`: the whole MCP path on a machine with no host. It starts this
//! binary as an MCP server over stdio (answering only through sampling, as in a real host),
//! connects to it as a reference host whose sampling is answered by the embedded model (or a
//! provider), calls one tool and prints the answer.

use crate::config::{Config, TryArgs};
use crate::fulfil::live::{Event, Live};
use crate::mcp::host::{self, Host};
use crate::routing::{self, SetupError};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::{Map, Value, json};
use std::io::{IsTerminal, Write};
use std::sync::Arc;

/// The tool arguments for one question.
pub fn arguments(tool: &str, prompt: &str, max_tokens: u32, schema: Option<&Value>) -> Value {
    let mut args = match tool {
        "generate" => json!({"prompt": prompt, "max_tokens": max_tokens}),
        "responses_create" => json!({"input": prompt, "max_output_tokens": max_tokens}),
        "generate_content" => json!({"contents": [{"role": "user", "parts": [{"text": prompt}]}],
                                     "generationConfig": {"maxOutputTokens": max_tokens}}),
        _ => json!({"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens}),
    };
    if let (Some(schema), Some(o)) = (schema, args.as_object_mut()) {
        if tool == "generate_content" {
            if let Some(Value::Object(config)) = o.get_mut("generationConfig") {
                config.insert("responseMimeType".into(), json!("application/json"));
                config.insert("responseJsonSchema".into(), schema.clone());
            }
        } else {
            o.insert("output_schema".into(), schema.clone());
        }
    }
    args
}

/// A progress line on a terminal while the model writes: the tokens of the answer so far,
/// redrawn as they come; `None` when stderr is not a terminal.
fn progress_line() -> Option<(Arc<Live>, tokio::task::JoinHandle<()>)> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let live = Live::new();
    let shown = live.clone();
    let printer = tokio::spawn(async move {
        while let Some(now) = shown.next().await {
            eprint!("\r  thinking… {} tokens ", now.tokens);
            let _ = std::io::stderr().flush();
        }
    });
    Some((live, printer))
}

/// Why `try` did not print an answer.
#[derive(Debug, thiserror::Error)]
pub enum TryError {
    #[error("--schema is not JSON: {0}")]
    Schema(serde_json::Error),
    #[error(transparent)]
    Model(#[from] SetupError),
    #[error("cannot find this program: {0}")]
    Program(std::io::Error),
    #[error("cannot start the server: {0}")]
    Start(std::io::Error),
    #[error("cannot connect to the server: {0}")]
    Connect(Box<rmcp::service::ClientInitializeError>),
    #[error("the call failed: {0}")]
    Call(rmcp::ServiceError),
    #[error("cannot print the result: {0}")]
    Print(serde_json::Error),
    /// The tool's error result, its text.
    #[error("{0}")]
    Tool(String),
    /// The tool's error result, printed whole (`--json`).
    #[error("the tool answered with an error")]
    ToolFailed,
}

/// Asks the model once, through this binary started as an MCP server with the model as its
/// host; the embedded model runs on `engines`.
pub async fn run(
    config: &Config,
    args: &TryArgs,
    engines: &crate::local::pool::Engines,
) -> Result<(), TryError> {
    let schema: Option<Value> = match &args.schema {
        Some(text) => Some(serde_json::from_str(text).map_err(TryError::Schema)?),
        None => None,
    };
    // The model `try` answers with, ready: the local one loaded (fetched first if needed).
    let model = routing::start_with(config, args.with, engines)?
        .ready()
        .await?;
    let exe = std::env::current_exe().map_err(TryError::Program)?;
    let command = tokio::process::Command::new(exe).configure(|c| {
        c.args(["--backend", "host", "--fallback", "none"]);
        c.env("RUST_LOG", "warn");
        c.stderr(std::process::Stdio::inherit());
    });
    let transport = TokioChildProcess::new(command).map_err(TryError::Start)?;
    let progress = progress_line();
    let host = Host {
        model,
        limits: Arc::new(config.limits.clone()),
        sampling_tools: !args.no_sampling_tools,
        live: progress.as_ref().map(|(live, _)| live.clone()),
    };
    let client = host
        .serve(transport)
        .await
        .map_err(|e| TryError::Connect(Box::new(e)))?;
    let arguments = match arguments(&args.tool, &args.prompt, args.max_tokens, schema.as_ref()) {
        Value::Object(o) => o,
        _ => Map::new(),
    };
    let request = CallToolRequestParams::new(args.tool.clone()).with_arguments(arguments);
    let result = client.call_tool(request).await;
    if let Some((live, printer)) = progress {
        live.event(Event::Finished);
        let _ = printer.await;
        eprint!("\r\x1b[K");
    }
    let _ = client.cancel().await;
    let result = result.map_err(TryError::Call)?;
    if args.json {
        let text = serde_json::to_string_pretty(&result).map_err(TryError::Print)?;
        println!("{text}");
    } else if result.is_error == Some(true) {
        return Err(TryError::Tool(host::text_of(&result.content)));
    } else {
        println!("{}", answer_text(&args.tool, &result));
    }
    if result.is_error == Some(true) {
        return Err(TryError::ToolFailed);
    }
    Ok(())
}

/// The answer's text: the tool's text, or the assistant text inside the object that the
/// Responses and Gemini shapes return as text.
fn answer_text(tool: &str, result: &rmcp::model::CallToolResult) -> String {
    let text = host::text_of(&result.content);
    let parsed: Option<Value> = match tool {
        "responses_create" | "generate_content" => serde_json::from_str(&text).ok(),
        _ => None,
    };
    let found = parsed.as_ref().and_then(|v| {
        v.pointer("/output/0/content/0/text")
            .or_else(|| v.pointer("/candidates/0/content/parts/0/text"))
            .and_then(Value::as_str)
    });
    found.map_or(text.clone(), str::to_owned)
}
