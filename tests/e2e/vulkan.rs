//! The embedded engine on a Vulkan device, in a build with `--features vulkan` (scripts/test
//! builds and runs it): Mesa's software device, lavapipe, stands in for a GPU as a real Vulkan
//! path (ggml-vulkan skips CPU-type devices unless `GGML_VK_VISIBLE_DEVICES` names them). The
//! model's layers go to the device, it answers as the CPU does, the start log and `list_models`
//! name the device, and every process ends cleanly after the engine's teardown with llama.cpp's
//! log on. Without the variable the build finds no device, says so and runs on the CPU.

use crate::common::raw::{Raw, tools_call};
use crate::local::{CAPITAL, TURN, answers_paris, first_try, log_line};
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_agent-as-model");

/// lavapipe, the first (and only) Vulkan device here, made visible to ggml-vulkan.
const LAVAPIPE: (&str, &str) = ("GGML_VK_VISIBLE_DEVICES", "0");

/// `try` of [`CAPITAL`] with the embedded model, answered Paris; `env` on top of a log that
/// shows the server's and llama.cpp's lines from info up. Its stdout and stderr.
fn run_try(env: &[(&str, &str)]) -> (String, String) {
    let _ = first_try();
    let mut command = Command::new(BIN);
    command
        .args(["try", CAPITAL])
        .env("RUST_LOG", "warn,agent_as_model=info,llama-cpp-2=info")
        .env_remove(LAVAPIPE.0)
        .env_remove("AGENT_AS_MODEL_GPU_LAYERS");
    for (key, value) in env {
        command.env(key, value);
    }
    answers_paris(&mut command)
}

#[tokio::test]
async fn the_model_runs_on_the_vulkan_device_answers_as_the_cpu_does_and_exits_cleanly() {
    let _turn = TURN.lock().await;
    // Exit 0 after the engine's teardown on the device (no SIGSEGV at exit).
    let (stdout, stderr) = run_try(&[LAVAPIPE]);
    // The start log names the device, and llama.cpp's own log the layers it offloaded.
    let ready = log_line(&stderr, "local model ready");
    assert!(
        ready.contains("Vulkan") && ready.contains("llvmpipe"),
        "{ready}"
    );
    assert!(ready.contains("gpu_layers=all"), "{ready}");
    // llama.cpp's fit placed the context too: lavapipe offers 2 GiB, the fit keeps 1 GiB free,
    // so two slots of the model's trained 32,768 tokens do not fit and the context is cut.
    let context: usize = ready
        .split("context=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{ready}"));
    assert!((4096..32768).contains(&context), "{ready}");
    let offloaded = stderr
        .lines()
        .find(|l| l.contains("offloaded") && l.contains("layers to GPU"))
        .unwrap_or_else(|| panic!("no offload line in {stderr}"));
    let (done, all) = offloaded
        .rsplit("offloaded ")
        .next()
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.split_once('/'))
        .unwrap_or_else(|| panic!("{offloaded}"));
    assert_eq!(done, all, "{offloaded}");
    assert!(!stderr.contains("none was found"), "{stderr}");

    // The same greedy answer from the CPU.
    let (cpu, cpu_log) = run_try(&[LAVAPIPE, ("AGENT_AS_MODEL_GPU_LAYERS", "0")]);
    assert_eq!(cpu, stdout, "{cpu_log}");
}

#[tokio::test]
async fn with_no_device_the_vulkan_build_says_so_and_runs_on_the_cpu() {
    let _turn = TURN.lock().await;
    let (_, stderr) = run_try(&[]);
    let warning = log_line(&stderr, "none was found");
    assert!(
        warning.contains("Vulkan") && warning.contains("GGML_VK_VISIBLE_DEVICES"),
        "{warning}"
    );
    let ready = log_line(&stderr, "local model ready");
    assert!(
        ready.contains("device=CPU") && ready.contains("gpu_layers=0"),
        "{ready}"
    );
}

/// `list_models` over MCP says where the loaded model runs, and the server, told to stop
/// (its stdin closed), exits 0 after freeing the engine on the device.
#[tokio::test]
async fn list_models_names_the_device_and_the_layers_on_it() {
    let _turn = TURN.lock().await;
    let _ = first_try();
    let mut raw = Raw::legacy(
        &[
            ("AGENT_AS_MODEL_BACKEND", "local"),
            LAVAPIPE,
            ("RUST_LOG", "warn,llama-cpp-2=info"),
        ],
        json!({}),
    );
    let long = Duration::from_secs(600);
    raw.send(&tools_call(
        json!(1),
        "generate",
        json!({"prompt": "The capital of France is", "max_tokens": 3}),
    ));
    let answer = raw.recv_id(&json!(1), long).expect("generate answered");
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    raw.send(&tools_call(json!(2), "list_models", json!({})));
    let reply = raw.recv_id(&json!(2), long).expect("list_models answered");
    let listed: Value =
        serde_json::from_str(reply["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    let local = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["backend"] == "local")
        .unwrap_or_else(|| panic!("{listed}"));
    let engine = &local["engine"];
    let device = engine["device"].as_str().unwrap_or_default();
    assert!(device.contains("Vulkan (llvmpipe"), "{engine}");
    assert_eq!(engine["gpu_layers"], json!("all"), "{engine}");
    raw.close_stdin();
    let status = raw.wait_exit(Duration::from_secs(60));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", raw.stderr());
}
