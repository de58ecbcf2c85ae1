//! The provider backend against a real OpenAI-compatible server: LiteLLM's proxy, with mock
//! models (its `mock_response`), started by the test. `scripts/test` installs LiteLLM into
//! `target/peers`; `AGENT_AS_MODEL_LITELLM` may point at another `litellm` executable.

use crate::common::*;
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const MASTER_KEY: &str = "sk-litellm-test-master-key-0123456789";

const CONFIG: &str = r#"model_list:
  - model_name: mock-text
    litellm_params:
      model: openai/mock-text
      api_key: sk-none
      mock_response: "The capital of France is Paris."
  - model_name: mock-json
    litellm_params:
      model: openai/mock-json
      api_key: sk-none
      mock_response: '{"city": "Paris", "country": "France"}'
"#;

pub fn start(port: u16) -> Killed {
    let dir = std::env::temp_dir().join(format!("aam-litellm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let exe = peer("AGENT_AS_MODEL_LITELLM", &venv_bin("litellm"));
    let child = Command::new(&exe)
        .args(["--config", config.to_str().unwrap(), "--host", "127.0.0.1"])
        .args(["--port", &port.to_string()])
        .env("LITELLM_MASTER_KEY", MASTER_KEY)
        .env("LITELLM_LOG", "ERROR")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start LiteLLM at {exe} ({e}); run scripts/test, which installs it")
        });
    Killed(child)
}

pub async fn wait_until_up(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(180);
    while Instant::now() < deadline {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            // Listening; give the app a moment to finish its start-up.
            tokio::time::sleep(Duration::from_millis(500)).await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("LiteLLM did not start within 180 s");
}

#[tokio::test]
async fn the_provider_works_against_litellm() {
    let port = free_port();
    let _proxy = start(port);
    wait_until_up(port).await;
    let url = format!("http://127.0.0.1:{port}/v1");
    for era in ERAS {
        let env = [
            ("AGENT_AS_MODEL_BACKEND", "provider"),
            ("AGENT_AS_MODEL_PROVIDER_URL", url.as_str()),
            ("AGENT_AS_MODEL_PROVIDER_MODEL", "mock-text"),
            ("AGENT_AS_MODEL_PROVIDER_KEY", MASTER_KEY),
        ];
        let client = connect_with_env(Host::echo(), era, &env).await;
        let r = call(
            &client,
            "messages_create",
            json!({"messages": [user("Capital of France?")], "max_tokens": 20, "temperature": 0.3}),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        assert_eq!(text(&r), "The capital of France is Paris.");
        let message = &structured(&r)["message"];
        assert_eq!(
            message["content"][0]["text"],
            "The capital of France is Paris."
        );
        assert_eq!(message["usage"]["estimated"], false);
        assert!(message["usage"]["output_tokens"].as_u64().unwrap() > 0);
        assert_eq!(structured(&r)["backend"], "provider");
        client.cancel().await.unwrap();
    }
    // Structured output through response_format, validated here.
    let env = [
        ("AGENT_AS_MODEL_BACKEND", "provider"),
        ("AGENT_AS_MODEL_PROVIDER_URL", url.as_str()),
        ("AGENT_AS_MODEL_PROVIDER_MODEL", "mock-json"),
        ("AGENT_AS_MODEL_PROVIDER_KEY", MASTER_KEY),
    ];
    let client = connect_with_env(Host::echo(), Era::Legacy, &env).await;
    let schema = json!({"type": "object", "required": ["city", "country"],
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}}});
    let r = call(
        &client,
        "responses_create",
        json!({"input": "Where is the Eiffel Tower?", "output_schema": schema}),
    )
    .await;
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(structured(&r)["structured_output"]["via"], "native");
    let response: Value = serde_json::from_str(&text(&r)).unwrap();
    let answer: Value = serde_json::from_str(
        response["output"][0]["content"][0]["text"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(answer, json!({"city": "Paris", "country": "France"}));
    client.cancel().await.unwrap();
    // A wrong key is refused by the proxy (LiteLLM answers 400 or 401), reported without it.
    let env = [
        ("AGENT_AS_MODEL_BACKEND", "provider"),
        ("AGENT_AS_MODEL_PROVIDER_URL", url.as_str()),
        ("AGENT_AS_MODEL_PROVIDER_MODEL", "mock-text"),
        ("AGENT_AS_MODEL_PROVIDER_KEY", "sk-wrong-key-for-this-proxy"),
    ];
    let client = connect_with_env(Host::echo(), Era::Legacy, &env).await;
    let e = err_text(&client, "generate", json!({"prompt": "hi"})).await;
    assert!(e.contains("provider answered 40"), "{e}");
    assert!(!e.contains("sk-wrong-key-for-this-proxy"), "{e}");
    client.cancel().await.unwrap();
    // Every call above asked for a stream, and LiteLLM's mock answers `stream: true` with
    // server-sent events: those answers were assembled from them. A caller following the call
    // with the official Python SDK's progress callback hears from it before the result.
    for (mode, version) in [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")] {
        let url = url.clone();
        let report = tokio::task::spawn_blocking(move || {
            let env = [
                ("AGENT_AS_MODEL_BACKEND", "provider"),
                ("AGENT_AS_MODEL_PROVIDER_URL", url.as_str()),
                ("AGENT_AS_MODEL_PROVIDER_MODEL", "mock-text"),
                ("AGENT_AS_MODEL_PROVIDER_KEY", MASTER_KEY),
            ];
            let args = json!({"prompt": "Capital of France?", "max_tokens": 20});
            crate::streaming::python_call("stdio", mode, "generate", &args, &env)
        })
        .await
        .unwrap();
        assert_eq!(report["protocol_version"], version, "{report}");
        assert_eq!(
            report["text"], "The capital of France is Paris.",
            "{report}"
        );
        let seen = report["progress"].as_array().unwrap();
        assert!(!seen.is_empty(), "{report}");
        assert!(
            seen[0]["t"].as_f64() < report["result_t"].as_f64(),
            "{report}"
        );
    }
}
